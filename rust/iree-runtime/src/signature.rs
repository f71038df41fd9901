//! A function's signature, read from the `iree.abi.declaration` reflection string IREE keeps in the module:
//! `sync func @prefill(%input0: tensor<1x?xi64> {tapeout.name = "tokens"}, ...) -> (%output0: tensor<...>, ...)`.

use std::fmt;

/// An element type, as tapeout's exporter writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit IEEE float.
    F64,
    /// Signed or signless 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Boolean (`i1`), one byte per element.
    Bool,
}

/// IREE's element type value (`iree_hal_element_type_t`, iree/hal/buffer_view.h): numerical type << 24 | bits.
const fn element(numerical: u32, bits: u32) -> u32 {
    (numerical << 24) | bits
}
const SIGNLESS: u32 = 0x10;
const SIGNED: u32 = 0x11;
const UNSIGNED: u32 = 0x12;
const BOOLEAN: u32 = 0x13;
const IEEE: u32 = 0x21;
const BRAIN: u32 = 0x22;

/// One row of [`DTYPES`].
#[derive(Clone, Copy, Debug)]
pub struct DTypeRow {
    /// The type.
    pub dtype: DType,
    /// Its MLIR spelling.
    pub mlir: &'static str,
    /// Bytes per element.
    pub size: u64,
    /// The IREE element type a value of it is made with.
    pub element_type: u32,
    /// What the JVM holds it in, for the Kotlin rendering's doc comments.
    pub jvm: &'static str,
}

/// Every element type tapeout serves: the one table of them. Its position is the type's code in the JNI
/// contract; the C shim takes and returns IREE's own element type values.
pub const DTYPES: [DTypeRow; 10] = [
    DTypeRow {
        dtype: DType::F32,
        mlir: "f32",
        size: 4,
        element_type: element(IEEE, 32),
        jvm: "32-bit float (`FloatArray`).",
    },
    DTypeRow {
        dtype: DType::F16,
        mlir: "f16",
        size: 2,
        element_type: element(IEEE, 16),
        jvm: "16-bit float, as its bits (`ShortArray`).",
    },
    DTypeRow {
        dtype: DType::BF16,
        mlir: "bf16",
        size: 2,
        element_type: element(BRAIN, 16),
        jvm: "bfloat16, as its bits (`ShortArray`).",
    },
    DTypeRow {
        dtype: DType::F64,
        mlir: "f64",
        size: 8,
        element_type: element(IEEE, 64),
        jvm: "64-bit float (raw bytes or a direct `ByteBuffer`).",
    },
    DTypeRow {
        dtype: DType::I8,
        mlir: "i8",
        size: 1,
        element_type: element(SIGNLESS, 8),
        jvm: "8-bit integer (`ByteArray`).",
    },
    DTypeRow {
        dtype: DType::I16,
        mlir: "i16",
        size: 2,
        element_type: element(SIGNLESS, 16),
        jvm: "16-bit integer (`ShortArray`).",
    },
    DTypeRow {
        dtype: DType::I32,
        mlir: "i32",
        size: 4,
        element_type: element(SIGNLESS, 32),
        jvm: "32-bit integer (`IntArray`).",
    },
    DTypeRow {
        dtype: DType::I64,
        mlir: "i64",
        size: 8,
        element_type: element(SIGNLESS, 64),
        jvm: "64-bit integer (`LongArray`).",
    },
    DTypeRow {
        dtype: DType::U8,
        mlir: "ui8",
        size: 1,
        element_type: element(UNSIGNED, 8),
        jvm: "Unsigned 8-bit integer (`ByteArray`).",
    },
    DTypeRow {
        dtype: DType::Bool,
        mlir: "i1",
        size: 1,
        element_type: element(BOOLEAN, 8),
        jvm: "Boolean, one byte each (`ByteArray` of 0/1).",
    },
];

impl DType {
    fn row(self) -> &'static DTypeRow {
        // Every variant has its row (a unit test checks the table against the enum).
        DTYPES.iter().find(|r| r.dtype == self).unwrap_or(&DTYPES[0])
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        self.row().size
    }

    /// The MLIR spelling (`f32`, `bf16`, `i1`, ...).
    pub fn mlir(self) -> &'static str {
        self.row().mlir
    }

    /// The type of an MLIR spelling, if tapeout serves it.
    pub fn from_mlir(text: &str) -> Option<DType> {
        let text = match text {
            "si8" => "i8",
            "si16" => "i16",
            "si32" => "i32",
            "si64" => "i64",
            other => other,
        };
        DTYPES.iter().find(|r| r.mlir == text).map(|r| r.dtype)
    }

    /// The number the JNI layer (and Kotlin's `IreeDType`) uses for this type: its position in [`DTYPES`].
    pub fn code(self) -> i32 {
        DTYPES.iter().position(|r| r.dtype == self).and_then(|p| i32::try_from(p).ok()).unwrap_or(-1)
    }

    /// The type of a [`DType::code`].
    pub fn from_code(code: i32) -> Option<DType> {
        DTYPES.get(usize::try_from(code).ok()?).map(|r| r.dtype)
    }

    /// IREE's element type for a value of this type.
    pub fn element_type(self) -> u32 {
        self.row().element_type
    }

    /// The type of an IREE element type: signed and signless integers of a width are one type here, as in the
    /// modules tapeout exports.
    pub fn from_element_type(element_type: u32) -> Option<DType> {
        let signless = match element_type >> 24 {
            SIGNED => element(SIGNLESS, element_type & 0xff_ffff),
            _ => element_type,
        };
        DTYPES.iter().find(|r| r.element_type == signless).map(|r| r.dtype)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mlir())
    }
}

/// One argument or result of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its `tapeout.name`, else IREE's `input<i>` / `output<i>`.
    pub name: String,
    /// Its element type; `None` when it is not a tensor of a type tapeout serves.
    pub dtype: Option<DType>,
    /// Its dimensions; `None` for a `?` one. Empty for a scalar tensor (and for a non-tensor).
    pub dims: Vec<Option<u64>>,
    /// The type as IREE wrote it (`tensor<1x?xi64>`).
    pub type_text: String,
}

impl Param {
    /// Whether `dims` fit this parameter's shape (same rank, equal where static).
    pub fn accepts_dims(&self, dims: &[u64]) -> bool {
        self.dims.len() == dims.len() && self.dims.iter().zip(dims).all(|(want, have)| want.is_none_or(|w| w == *have))
    }
}

/// A function's arguments and results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The function's name in the module (`prefill`).
    pub name: String,
    /// Its arguments, in order.
    pub inputs: Vec<Param>,
    /// Its results, in order.
    pub outputs: Vec<Param>,
    /// The declaration it was read from.
    pub declaration: String,
}

/// Reads a signature out of an `iree.abi.declaration`; `None` when the text is not one.
pub fn parse_declaration(name: &str, declaration: &str) -> Option<Signature> {
    let open = declaration.find('(')?;
    let (args_text, rest) = split_balanced(&declaration[open..])?;
    let rest = rest.trim_start();
    let outputs = match rest.strip_prefix("->") {
        None => Vec::new(),
        Some(results) => {
            let results = results.trim_start();
            if results.starts_with('(') {
                params(split_balanced(results)?.0, "output")?
            } else {
                params(results, "output")?
            }
        }
    };
    Some(Signature {
        name: name.to_owned(),
        inputs: params(args_text, "input")?,
        outputs,
        declaration: declaration.to_owned(),
    })
}

/// Splits "(inner) rest" into ("inner", " rest") at the parenthesis matching the first.
fn split_balanced(text: &str) -> Option<(&str, &str)> {
    let mut depth = 0usize;
    let mut in_string = false;
    for (i, c) in text.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '(' | '<' | '{' | '[' if !in_string => depth += 1,
            ')' | '>' | '}' | ']' if !in_string => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some((&text[1..i], &text[i + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

/// Splits a parameter list at its top-level commas.
fn top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut in_string, mut start) = (0usize, false, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '(' | '<' | '{' | '[' if !in_string => depth += 1,
            ')' | '>' | '}' | ']' if !in_string => depth = depth.saturating_sub(1),
            ',' if !in_string && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text[start..].trim().is_empty() {
        parts.push(&text[start..]);
    }
    parts
}

fn params(list: &str, prefix: &str) -> Option<Vec<Param>> {
    top_level(list)
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let part = part.trim();
            // "%input0: tensor<..> {attrs}" or, for results, possibly just "tensor<..>".
            let body = match part.split_once(':') {
                Some((head, body)) if head.trim_start().starts_with('%') => body.trim(),
                _ => part,
            };
            let (type_text, attrs) = match body.find(" {") {
                Some(at) => (body[..at].trim(), &body[at..]),
                None => (body.trim(), ""),
            };
            let name = tapeout_name(attrs).unwrap_or_else(|| format!("{prefix}{i}"));
            let (dtype, dims) = tensor_type(type_text).unwrap_or((None, Vec::new()));
            Some(Param { name, dtype, dims, type_text: type_text.to_owned() })
        })
        .collect()
}

fn tapeout_name(attrs: &str) -> Option<String> {
    let at = attrs.find("tapeout.name")?;
    let rest = &attrs[at + "tapeout.name".len()..];
    let start = rest.find('"')? + 1;
    let len = rest[start..].find('"')?;
    Some(rest[start..start + len].to_owned())
}

type TensorType = (Option<DType>, Vec<Option<u64>>);

fn tensor_type(text: &str) -> Option<TensorType> {
    let inner = text.strip_prefix("tensor<")?.strip_suffix('>')?;
    let mut pieces: Vec<&str> = inner.split('x').collect();
    let element = pieces.pop()?;
    let dims = pieces
        .into_iter()
        .map(|d| if d == "?" { Some(None) } else { d.parse::<u64>().ok().map(Some) })
        .collect::<Option<Vec<_>>>()?;
    Some((DType::from_mlir(element), dims))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dtype_table_names_every_type_once_and_round_trips() {
        for (code, row) in DTYPES.iter().enumerate() {
            let code = i32::try_from(code).unwrap();
            assert_eq!(row.dtype.code(), code);
            assert_eq!(DType::from_code(code), Some(row.dtype));
            assert_eq!(DType::from_mlir(row.mlir), Some(row.dtype));
            assert_eq!(DType::from_element_type(row.element_type), Some(row.dtype));
            assert_eq!(row.size * 8, u64::from(row.element_type & 0xff).max(8), "{}", row.mlir);
        }
        // IREE's signed integers are ours; its values spelled out in iree/hal/buffer_view.h.
        assert_eq!(DType::from_element_type(0x1100_0020), Some(DType::I32));
        assert_eq!(DType::F32.element_type(), 0x2100_0020);
        assert_eq!(DType::BF16.element_type(), 0x2200_0010);
        assert_eq!(DType::Bool.element_type(), 0x1300_0008);
        assert_eq!(DType::from_element_type(0x2100_0008), None, "an 8-bit float is not served");
        assert_eq!(DType::from_code(10), None);
    }

    #[test]
    fn reads_names_types_and_dynamic_dims() {
        let text = r#"sync func @main(%input0: tensor<?x4xf32> {tapeout.name = "q"}, %input1: tensor<i64> {tapeout.name = "k"}) -> (%output0: tensor<?x4xf32> {tapeout.name = "t1"}, %output1: tensor<2x3xbf16>)"#;
        let sig = parse_declaration("main", text).unwrap();
        assert_eq!(sig.inputs.len(), 2);
        assert_eq!(sig.inputs[0].name, "q");
        assert_eq!(sig.inputs[0].dtype, Some(DType::F32));
        assert_eq!(sig.inputs[0].dims, vec![None, Some(4)]);
        assert_eq!(sig.inputs[1].name, "k");
        assert!(sig.inputs[1].dims.is_empty());
        assert_eq!(sig.outputs[0].name, "t1");
        assert_eq!(sig.outputs[1].name, "output1");
        assert_eq!(sig.outputs[1].dtype, Some(DType::BF16));
        assert!(sig.inputs[0].accepts_dims(&[7, 4]));
        assert!(!sig.inputs[0].accepts_dims(&[7, 5]));
        assert!(!sig.inputs[0].accepts_dims(&[4]));
    }

    #[test]
    fn a_name_with_commas_and_brackets_stays_one_parameter() {
        let text = r#"sync func @f(%input0: tensor<1xi1> {tapeout.name = "a, (b>"}) -> (%output0: tensor<1xi1>)"#;
        let sig = parse_declaration("f", text).unwrap();
        assert_eq!(sig.inputs.len(), 1);
        assert_eq!(sig.inputs[0].name, "a, (b>");
        assert_eq!(sig.inputs[0].dtype, Some(DType::Bool));
    }

    #[test]
    fn no_results_and_garbage() {
        let sig = parse_declaration("g", "sync func @g(%input0: tensor<3xf16>)").unwrap();
        assert!(sig.outputs.is_empty());
        assert_eq!(sig.inputs[0].dims, vec![Some(3)]);
        assert!(parse_declaration("h", "no parens here").is_none());
        assert!(parse_declaration("h", "func @h(unbalanced").is_none());
    }
}
