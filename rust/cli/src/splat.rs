//! Parsing of `--splat KEY=DTYPE:VALUE:COUNT` specifications.

/// Parses `DTYPE:VALUE:COUNT` into a little-endian one-element pattern and a byte length.
///
/// VALUE is a decimal number, or `0x…` for the raw bits of one element (exact NaN payloads).
pub fn parse(spec: &str) -> Result<(Vec<u8>, u64), String> {
    let mut parts = spec.splitn(3, ':');
    let (Some(dtype), Some(value), Some(count)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("expected DTYPE:VALUE:COUNT, e.g. f32:0.5:128".into());
    };
    let count: u64 = count.parse().map_err(|_| format!("COUNT {count:?} is not a whole number of elements"))?;
    let pattern = encode(dtype, value)?;
    let length = count
        .checked_mul(pattern.len() as u64)
        .ok_or_else(|| format!("{count} elements of {dtype} exceed 2^64 bytes"))?;
    Ok((pattern, length))
}

fn bits(value: &str, width: usize) -> Option<Result<Vec<u8>, String>> {
    let hex = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X"))?;
    Some(
        u128::from_str_radix(hex, 16)
            .ok()
            .filter(|v| width >= 16 || *v >> (width * 8) == 0)
            .map(|v| v.to_le_bytes()[..width].to_vec())
            .ok_or_else(|| format!("bit pattern {value} does not fit in {width} bytes")),
    )
}

fn encode(dtype: &str, value: &str) -> Result<Vec<u8>, String> {
    let width = match dtype {
        "i8" | "u8" | "bool" | "i1" => 1,
        "f16" | "bf16" | "i16" | "u16" => 2,
        "f32" | "i32" | "u32" => 4,
        "f64" | "i64" | "u64" => 8,
        other => {
            return Err(format!(
                "unknown dtype {other:?}; use one of f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool"
            ));
        }
    };
    if let Some(b) = bits(value, width) {
        return b;
    }
    let bad = |what: &str| format!("VALUE {value:?} is not {what} for {dtype}");
    let float = || value.parse::<f64>().map_err(|_| bad("a number"));
    #[allow(clippy::cast_possible_truncation)] // narrowing a float literal to the requested float dtype
    let bytes = match dtype {
        "f16" => half::f16::from_f64(float()?).to_le_bytes().to_vec(),
        "bf16" => half::bf16::from_f64(float()?).to_le_bytes().to_vec(),
        "f32" => (float()? as f32).to_le_bytes().to_vec(),
        "f64" => float()?.to_le_bytes().to_vec(),
        "bool" | "i1" => match value {
            "true" | "1" => vec![1],
            "false" | "0" => vec![0],
            _ => return Err(bad("true/false")),
        },
        "i8" => value.parse::<i8>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
        "u8" => value.parse::<u8>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
        "i16" => value.parse::<i16>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
        "u16" => value.parse::<u16>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
        "i32" => value.parse::<i32>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
        "u32" => value.parse::<u32>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
        "i64" => value.parse::<i64>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
        _ => value.parse::<u64>().map_err(|_| bad("an integer in range"))?.to_le_bytes().to_vec(),
    };
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn float_splat_is_one_le_element() {
        assert_eq!(parse("f32:1.5:16"), Ok((1.5f32.to_le_bytes().to_vec(), 64)));
        assert_eq!(parse("bf16:1.0:3"), Ok((vec![0x80, 0x3f], 6)));
        assert_eq!(parse("f16:-2:1"), Ok((vec![0x00, 0xc0], 2)));
    }

    #[test]
    fn bit_patterns_keep_nan_payloads() {
        assert_eq!(parse("f32:0x7fc00001:2"), Ok((vec![0x01, 0x00, 0xc0, 0x7f], 8)));
        assert!(parse("f16:0x12345:1").is_err());
    }

    #[test]
    fn integers_are_range_checked() {
        assert_eq!(parse("i8:-128:4"), Ok((vec![0x80], 4)));
        assert!(parse("i8:128:4").is_err());
        assert!(parse("i32:1.5:4").is_err());
    }

    #[test]
    fn malformed_specs_say_what_is_expected() {
        assert!(parse("f32:1").unwrap_err().contains("DTYPE:VALUE:COUNT"));
        assert!(parse("q4:1:1").unwrap_err().contains("unknown dtype"));
        assert!(parse("u64:1:18446744073709551615").unwrap_err().contains("exceed"));
    }
}
