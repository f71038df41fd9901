//! The metadata blob stored with every archive entry, by `export` and `convert` alike: `TENSORv0:` then a JSON
//! object describing the bytes (IREE ignores it; it makes an archive describe itself). The keys, written only here:
//!
//! | key | when | value |
//! |---|---|---|
//! | `dtype` | always | the dtype of the stored bytes (`f32`, `bf16`, `u8`, …) |
//! | `shape` | always | the entry's static shape |
//! | `encoding` | packed blocks kept as stored (`convert`) | the block encoding (`Q4_K`, …) |
//! | `from` | the bytes were converted | what they were converted from: a dtype (widened) or an encoding |
//! | `transposed_from` | stored transposed (`export`) | `[rows, cols]` of the tensor as held |
//! | `words_of` | narrow values held in 32-bit words (`export --target vulkan`) | the narrow dtype the `i32` words hold, lowest bits first, zero-padded to a whole word |
//! | `plane`, `packed_shape`, `padded_rows` | one plane of a packed weight (`export`) | the plane's suffix, the packed weight's `[N, K]`, and its padded row count when that differs from `N` |

/// What every metadata blob starts with; the JSON object follows. `tapeout dump` reads blobs by it.
pub const TENSOR_METADATA_PREFIX: &str = "TENSORv0:";

/// The plane of a packed weight an entry holds.
pub(crate) struct PlaneOf<'a> {
    /// The plane's key suffix (`qs`, `d`, …).
    pub(crate) suffix: &'a str,
    /// The packed weight's logical shape.
    pub(crate) packed_shape: &'a [u64],
    /// Its rows padded for sub-byte planes, when that differs from `packed_shape[0]`.
    pub(crate) padded_rows: Option<u64>,
}

/// What one entry's metadata says; [`TensorMetadata::encode`] writes it.
pub(crate) struct TensorMetadata<'a> {
    /// The stored dtype's name.
    pub(crate) dtype: &'a str,
    /// The static shape.
    pub(crate) shape: &'a [u64],
    /// The block encoding of packed bytes kept as stored.
    pub(crate) encoding: Option<&'a str>,
    /// What the bytes were converted from.
    pub(crate) from: Option<&'a str>,
    /// `[rows, cols]` of a tensor stored transposed.
    pub(crate) transposed_from: Option<[u64; 2]>,
    /// The plane, for one plane of a packed weight.
    pub(crate) plane: Option<PlaneOf<'a>>,
    /// The narrow dtype 32-bit words hold.
    pub(crate) words_of: Option<&'a str>,
}

impl<'a> TensorMetadata<'a> {
    /// Metadata with only the dtype and shape.
    pub(crate) fn new(dtype: &'a str, shape: &'a [u64]) -> Self {
        TensorMetadata { dtype, shape, encoding: None, from: None, transposed_from: None, plane: None, words_of: None }
    }

    /// The blob: `TENSORv0:` and the JSON object (keys sorted).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut m = serde_json::json!({ "dtype": self.dtype, "shape": self.shape });
        if let Some(e) = self.encoding {
            m["encoding"] = e.into();
        }
        if let Some(f) = self.from {
            m["from"] = f.into();
        }
        if let Some(w) = self.words_of {
            m["words_of"] = w.into();
        }
        if let Some(t) = self.transposed_from {
            m["transposed_from"] = serde_json::json!(t);
        }
        if let Some(p) = &self.plane {
            m["plane"] = p.suffix.into();
            m["packed_shape"] = serde_json::json!(p.packed_shape);
            if let Some(rows) = p.padded_rows {
                m["padded_rows"] = rows.into();
            }
        }
        format!("{TENSOR_METADATA_PREFIX}{m}").into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_and_absent_ones_left_out() {
        let shape = [4, 3];
        assert_eq!(TensorMetadata::new("f32", &shape).encode(), br#"TENSORv0:{"dtype":"f32","shape":[4,3]}"#);
        let m = TensorMetadata {
            from: Some("Q4_K"),
            transposed_from: Some([3, 4]),
            plane: Some(PlaneOf { suffix: "qs", packed_shape: &[5, 256], padded_rows: Some(64) }),
            ..TensorMetadata::new("i4", &shape)
        };
        assert_eq!(
            String::from_utf8(m.encode()).unwrap(),
            r#"TENSORv0:{"dtype":"i4","from":"Q4_K","packed_shape":[5,256],"padded_rows":64,"plane":"qs","shape":[4,3],"transposed_from":[3,4]}"#
        );
    }
}
