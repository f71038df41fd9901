//! A function's signature, read from the `iree.abi.declaration` reflection string IREE keeps in the module:
//! `sync func @prefill(%input0: tensor<1x?xi64> {tapeout.name = "tokens"}, ...) -> (%output0: tensor<...>, ...)`.

use std::fmt;

use crate::error::IreeError;

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
    /// What each dimension must be beside the others', from the `tapeout.dims` attribute tapeout writes on an
    /// argument with `?` dimensions (`d0x4`: docs/signature-format.md); one per dimension, or empty when the
    /// parameter has no such attribute (a result, a static argument, a module of an older tapeout).
    pub dim_rules: Vec<DimRule>,
}

/// What one dimension of an argument must be, as its `tapeout.dims` attribute says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimRule {
    /// Any extent (`?`).
    Any,
    /// This extent: static in the type, or a `?` the graph ties to a static extent (`4`).
    Extent(u64),
    /// The same extent as every other argument dimension of this class in the function (`d0`).
    Class(String),
}

/// An argument dimension in a [`DimMismatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimAt {
    /// The argument's position.
    pub index: usize,
    /// The argument's name.
    pub argument: String,
    /// The dimension.
    pub axis: usize,
    /// Its extent in the call.
    pub extent: u64,
}

/// A call that breaks what the function's graph requires of its `?` dimensions ([`Signature::check_equal_dims`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimMismatch {
    /// Two dimensions of one class with different extents.
    Unequal {
        /// The class (`d0`).
        class: String,
        /// The class's first dimension in the call.
        first: DimAt,
        /// One that differs from it.
        second: DimAt,
    },
    /// A dimension the graph ties to a static extent, given another.
    Extent {
        /// The dimension.
        at: DimAt,
        /// The extent it must have.
        required: u64,
    },
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

impl DimMismatch {
    /// The typed error for a call of `signature` with arguments of shapes `given` that broke this rule: a tie to
    /// a static extent is a shape error showing the shape the graph requires.
    pub fn into_error(self, signature: &Signature, given: &[Vec<u64>]) -> IreeError {
        match self {
            DimMismatch::Unequal { first, second, .. } => IreeError::UnequalDims {
                function: signature.name.clone(),
                first: (first.argument, first.axis, first.extent),
                second: (second.argument, second.axis, second.extent),
            },
            DimMismatch::Extent { at, required } => {
                let param = signature.inputs.get(at.index);
                let dims = param.map(|p| p.dims.as_slice()).unwrap_or_default();
                let text = |d: Vec<String>| format!("[{}]", d.join(", "));
                let expected = dims
                    .iter()
                    .enumerate()
                    .map(|(i, d)| match d {
                        _ if i == at.axis => required.to_string(),
                        Some(n) => n.to_string(),
                        None => "?".to_owned(),
                    })
                    .collect();
                let given = given.get(at.index).map(|g| g.iter().map(u64::to_string).collect()).unwrap_or_default();
                IreeError::Shape {
                    function: signature.name.clone(),
                    index: at.index,
                    argument: at.argument,
                    expected: format!("{} (the graph ties dimension {} to {required})", text(expected), at.axis),
                    given: text(given),
                }
            }
        }
    }
}

impl Signature {
    /// Checks the extents of a call's arguments (`given`, one shape per argument, in order) against what the
    /// function's graph requires of their `?` dimensions: every dimension of a class one extent, and a `?` tied to
    /// a static extent that one. Arguments without `tapeout.dims`, and a rule list that does not fit the given
    /// rank (refused by the shape check before), are not checked.
    ///
    /// # Errors
    /// The first dimension that breaks a rule, with the one it disagrees with.
    pub fn check_equal_dims(&self, given: &[Vec<u64>]) -> Result<(), DimMismatch> {
        let mut first: Vec<(&str, DimAt)> = Vec::new();
        for (index, (param, dims)) in self.inputs.iter().zip(given).enumerate() {
            if param.dim_rules.len() != dims.len() {
                continue;
            }
            for (axis, (rule, &extent)) in param.dim_rules.iter().zip(dims).enumerate() {
                let at = DimAt { index, argument: param.name.clone(), axis, extent };
                match rule {
                    DimRule::Any => {}
                    DimRule::Extent(n) if *n == extent => {}
                    DimRule::Extent(n) => return Err(DimMismatch::Extent { at, required: *n }),
                    DimRule::Class(class) => match first.iter().find(|(c, _)| c == class) {
                        None => first.push((class, at)),
                        Some((_, seen)) if seen.extent == extent => {}
                        Some((_, seen)) => {
                            return Err(DimMismatch::Unequal { class: class.clone(), first: seen.clone(), second: at });
                        }
                    },
                }
            }
        }
        Ok(())
    }
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
            let dim_rules = attribute(attrs, "tapeout.dims")
                .and_then(|text| dim_rules(&text))
                .filter(|rules| rules.len() == dims.len())
                .unwrap_or_default();
            Some(Param { name, dtype, dims, type_text: type_text.to_owned(), dim_rules })
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

/// The string value of attribute `key` in a parameter's attribute dictionary (`{tapeout.dims = "d0", …}`), read
/// entry by entry so that a name holding the text of another key is not mistaken for it.
fn attribute(attrs: &str, key: &str) -> Option<String> {
    let (inner, _) = split_balanced(attrs.trim_start())?;
    top_level(inner).into_iter().find_map(|entry| {
        let (k, v) = entry.split_once('=')?;
        let v = v.trim();
        (k.trim() == key).then(|| v.strip_prefix('"')?.strip_suffix('"').map(str::to_owned))?
    })
}

/// `d0x4x?` as rules; `None` when a part is none of a number, `?` and `d<k>`.
fn dim_rules(text: &str) -> Option<Vec<DimRule>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split('x')
        .map(|part| match part {
            "?" => Some(DimRule::Any),
            _ if part.starts_with('d') && part.len() > 1 && part[1..].bytes().all(|b| b.is_ascii_digit()) => {
                Some(DimRule::Class(part.to_owned()))
            }
            _ => part.parse().ok().map(DimRule::Extent),
        })
        .collect()
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
    fn dims_rules_are_read_and_checked_across_arguments() {
        // As iree-compile 3.13 prints it: the attributes sorted, tapeout.dims first. The name holds the other
        // key's text, which must not be read as it.
        let text = r#"sync func @main(%input0: tensor<?x4xf32> {tapeout.dims = "d0x4", tapeout.name = "a"}, %input1: tensor<?x?xf32> {tapeout.dims = "?xd0", tapeout.name = "b, tapeout.dims = 7"}, %input2: tensor<?xf32> {tapeout.dims = "5", tapeout.name = "c"}, %input3: tensor<?xf32> {tapeout.name = "old"}) -> (%output0: tensor<?x4xf32> {tapeout.name = "y"})"#;
        let sig = parse_declaration("main", text).unwrap();
        let class = |c: &str| DimRule::Class(c.to_owned());
        assert_eq!(sig.inputs[0].dim_rules, [class("d0"), DimRule::Extent(4)]);
        assert_eq!(sig.inputs[1].dim_rules, [DimRule::Any, class("d0")]);
        assert_eq!(sig.inputs[2].dim_rules, [DimRule::Extent(5)]);
        assert!(sig.inputs[3].dim_rules.is_empty(), "no attribute: nothing to check");
        assert!(sig.outputs[0].dim_rules.is_empty());

        let call = |a: u64, b: u64, c: u64| sig.check_equal_dims(&[vec![a, 4], vec![9, b], vec![c], vec![11]]);
        assert_eq!(call(3, 3, 5), Ok(()));
        let at =
            |index: usize, argument: &str, axis, extent| DimAt { index, argument: argument.to_owned(), axis, extent };
        assert_eq!(
            call(3, 1, 5),
            Err(DimMismatch::Unequal {
                class: "d0".into(),
                first: at(0, "a", 0, 3),
                second: at(1, "b, tapeout.dims = 7", 1, 1)
            })
        );
        assert_eq!(call(3, 3, 7), Err(DimMismatch::Extent { at: at(2, "c", 0, 7), required: 5 }));
        let e = call(3, 3, 7).unwrap_err().into_error(&sig, &[vec![3, 4], vec![9, 3], vec![7], vec![11]]);
        assert!(
            e.to_string().contains("argument 2 'c' has shape [5] (the graph ties dimension 0 to 5), given [7]"),
            "{e}"
        );
        let e = call(16_777_216, 1, 5).unwrap_err().into_error(&sig, &[]);
        assert!(
            matches!(&e, IreeError::UnequalDims { first, second, .. } if first == &("a".to_owned(), 0, 16_777_216) && second.2 == 1),
            "{e}"
        );
        assert!(e.to_string().contains("the graph requires them equal"), "{e}");
        assert!(dim_rules("d0xq").is_none() && dim_rules("dx4").is_none() && dim_rules("").is_some());
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
