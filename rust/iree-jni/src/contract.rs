//! The one definition of what `dev.tapeout.iree` and this crate exchange: the exception classes a native failure
//! becomes (with their typed fields), the element types and IREE's status codes. The Kotlin side reads them from
//! `jvm-iree/src/main/kotlin/dev/tapeout/iree/IreeContract.kt`, which [`kotlin`] (test code) renders from the tables
//! here; a test fails when the committed file differs (regenerate it with
//! `TAPEOUT_REGENERATE=1 cargo test -p tapeout-iree-jni`).
//!
//! A failure crosses as `IreeNativeError(kind, message, texts, numbers)`: `kind` is the class's position in
//! [`CLASSES`] (thrown ones only), and each field of the class takes, in order, the next of `texts` (a text or a
//! file) or of `numbers` (an Int, a Long, a status code); a list of texts takes its count from `numbers` first.

#[cfg(test)]
use tapeout_iree::{DTYPES, STATUS_CODES};

/// How a field of an exception class is typed in Kotlin and carried across.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldType {
    /// `String`, from `texts`.
    Text,
    /// `java.io.File`, its path from `texts`.
    File,
    /// `List<String>`: its count from `numbers`, then that many `texts`.
    Texts,
    /// `Int`, from `numbers`.
    Int,
    /// `Long`, from `numbers`.
    Long,
    /// `IreeStatusCode`, IREE's number from `numbers`.
    Status,
}

/// A field: its Kotlin name, type and doc.
#[cfg_attr(not(test), expect(dead_code, reason = "read by the Kotlin rendering"))]
pub(crate) struct Field(pub(crate) &'static str, pub(crate) FieldType, pub(crate) &'static str);

/// The failures the native side reports, one per thrown exception class (the code is the position).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// `IreeRuntimeException`.
    Runtime,
    /// `IreeDeviceUnavailableException`.
    DeviceUnavailable,
    /// `IreeNotAModuleException`.
    NotAModule,
    /// `IreeWrongTargetException`.
    WrongTarget,
    /// `IreeMissingCpuFeaturesException`.
    MissingCpuFeatures,
    /// `IreeMissingParameterException`.
    MissingParameter,
    /// `IreeParameterFileException`.
    ParameterFile,
    /// `IreeConflictingParameterException`.
    ConflictingParameter,
    /// `IreeNoSuchFunctionException`.
    NoSuchFunction,
    /// `IreeArityException`.
    Arity,
    /// `IreeDTypeException`.
    DType,
    /// `IreeShapeException`.
    Shape,
    /// `IreeUnequalDimsException`.
    UnequalDims,
    /// `IreeSizeException`.
    Size,
    /// `IreeIoException`.
    Io,
    /// `IreeForeignValueException`.
    ForeignValue,
    /// `IreeUsageException`.
    Usage,
    /// `IreeInternalException`.
    Internal,
}

/// An exception class of the Kotlin side.
#[cfg_attr(not(test), expect(dead_code, reason = "read by the Kotlin rendering"))]
pub(crate) struct Class {
    /// The failure it reports; `None` for a class only extended.
    pub(crate) kind: Option<ErrorKind>,
    /// The Kotlin class name.
    pub(crate) name: &'static str,
    /// The class it extends: `IreeException` or another of these, whose fields come first in its own.
    pub(crate) parent: &'static str,
    /// Its KDoc.
    pub(crate) doc: &'static str,
    /// Its fields, in the order they cross.
    pub(crate) fields: &'static [Field],
}

use FieldType::{File, Int, Long, Status, Text, Texts};

const ARGUMENT_FIELDS: &[Field] = &[
    Field("function", Text, "The function called."),
    Field("index", Int, "The argument's position."),
    Field("argument", Text, "The argument's name (`tapeout.name`)."),
    Field("expected", Text, "What the function takes (`f32`; a shape like `[?, 6]`, `?` where dynamic)."),
    Field("given", Text, "What it was given."),
];

/// Every exception class a native failure becomes, and the classes they extend.
pub(crate) const CLASSES: &[Class] = &[
    Class {
        kind: Some(ErrorKind::Runtime),
        name: "IreeRuntimeException",
        parent: "IreeException",
        doc: "IREE refused an operation: [code] is IREE's status, [during] what tapeout was doing.",
        fields: &[Field("code", Status, "IREE's status code."), Field("during", Text, "What tapeout was doing.")],
    },
    Class {
        kind: Some(ErrorKind::DeviceUnavailable),
        name: "IreeDeviceUnavailableException",
        parent: "IreeException",
        doc: "A driver this runtime has could not make a device here: its system library (the Vulkan loader, \
              `libvulkan.so.1`) or a device it drives is missing. The message names what to install (for Vulkan: a \
              loader and a driver, e.g. Debian's `libvulkan1` and `mesa-vulkan-drivers`) or says to serve on \
              `local-task`.",
        fields: &[
            Field("driver", Text, "The driver asked for (`vulkan`: the URI's scheme)."),
            Field("uri", Text, "The device URI as given."),
            Field("code", Status, "IREE's status (`NOT_FOUND`, `UNAVAILABLE`, ...)."),
        ],
    },
    Class {
        kind: Some(ErrorKind::NotAModule),
        name: "IreeNotAModuleException",
        parent: "IreeException",
        doc: "The bytes given as a compiled module are not an IREE module (.vmfb), or not a whole one.",
        fields: &[],
    },
    Class {
        kind: Some(ErrorKind::WrongTarget),
        name: "IreeWrongTargetException",
        parent: "IreeException",
        doc: "The module was compiled for another device than [device] (e.g. for Vulkan, loaded on local-task).",
        fields: &[Field("device", Text, "The device it was loaded on.")],
    },
    Class {
        kind: Some(ErrorKind::MissingCpuFeatures),
        name: "IreeMissingCpuFeaturesException",
        parent: "IreeWrongTargetException",
        doc: "The module's CPU code uses instructions this machine's CPU lacks ([missing]): calling it would crash the \
              process (SIGILL), so it is refused at load. Recompile with `--iree-llvmcpu-target-cpu=host` on this \
              machine, or a lower `--iree-llvmcpu-target-cpu` (`generic` runs on any x86-64).",
        fields: &[
            Field("device", Text, "The device it was loaded on."),
            Field("cpu", Text, "LLVM's name of the CPU the module was compiled for."),
            Field("missing", Texts, "LLVM's names of the features this CPU lacks."),
            Field("unchecked", Texts, "Features of the module's target this runtime cannot test for."),
        ],
    },
    Class {
        kind: Some(ErrorKind::MissingParameter),
        name: "IreeMissingParameterException",
        parent: "IreeException",
        doc: "The module needs parameter [key] (`<scope>::*` when no file was given under its scope) that no file \
              holds.",
        fields: &[Field("key", Text, "The key, with its scope.")],
    },
    Class {
        kind: Some(ErrorKind::ParameterFile),
        name: "IreeParameterFileException",
        parent: "IreeException",
        doc: "A parameter file that cannot be served: absent, truncated, not an archive, entries outside the file, \
              or a key another file of its scope holds with other bytes.",
        fields: &[Field("file", File, "The file.")],
    },
    Class {
        kind: Some(ErrorKind::ConflictingParameter),
        name: "IreeConflictingParameterException",
        parent: "IreeException",
        doc: "Two parameter files under one scope hold key [key] with different contents: which one IREE would use is \
              not left to the order of the list. Give each key once per scope.",
        fields: &[
            Field("scope", Text, "The scope both files were given under."),
            Field("key", Text, "The key."),
            Field("first", File, "The file listed first."),
            Field("second", File, "The other file."),
        ],
    },
    Class {
        kind: Some(ErrorKind::NoSuchFunction),
        name: "IreeNoSuchFunctionException",
        parent: "IreeException",
        doc: "The module has no function [name]; it has [available].",
        fields: &[Field("name", Text, "The name asked for."), Field("available", Texts, "The functions it has.")],
    },
    Class {
        kind: Some(ErrorKind::Arity),
        name: "IreeArityException",
        parent: "IreeException",
        doc: "A call to [function] with [given] arguments; it takes [expected].",
        fields: &[
            Field("function", Text, "The function called."),
            Field("expected", Int, "How many arguments it takes."),
            Field("given", Int, "How many it was given."),
        ],
    },
    Class {
        kind: None,
        name: "IreeArgumentException",
        parent: "IreeException",
        doc: "[function]'s argument [index] ([argument]) is not what the function takes: it takes [expected], given \
              [given].",
        fields: ARGUMENT_FIELDS,
    },
    Class {
        kind: Some(ErrorKind::DType),
        name: "IreeDTypeException",
        parent: "IreeArgumentException",
        doc: "An argument of the wrong element type ([expected] and [given] are `f32`, `i64`, ...).",
        fields: ARGUMENT_FIELDS,
    },
    Class {
        kind: Some(ErrorKind::Shape),
        name: "IreeShapeException",
        parent: "IreeArgumentException",
        doc: "An argument of the wrong shape ([expected] with `?` where dynamic, e.g. `[?, 6]`; [given] e.g. `[2, 4]`).",
        fields: ARGUMENT_FIELDS,
    },
    Class {
        kind: Some(ErrorKind::UnequalDims),
        name: "IreeUnequalDimsException",
        parent: "IreeException",
        doc: "Two `?` dimensions of a call's arguments that the function's graph requires equal (the module's \
              `tapeout.dims`, the signature's `dims`) were given different extents: the module would read one \
              tensor at the other's extent, out of bounds. Pass tensors whose extents agree there.",
        fields: &[
            Field("function", Text, "The function called."),
            Field("firstArgument", Text, "The first argument's name."),
            Field("firstAxis", Int, "Its dimension."),
            Field("firstExtent", Long, "Its extent."),
            Field("secondArgument", Text, "The argument whose dimension differs."),
            Field("secondAxis", Int, "Its dimension."),
            Field("secondExtent", Long, "Its extent."),
        ],
    },
    Class {
        kind: Some(ErrorKind::Size),
        name: "IreeSizeException",
        parent: "IreeException",
        doc: "Host data of [given] bytes for a value of [expected] bytes (or a shape whose size no 64-bit count holds).",
        fields: &[Field("expected", Long, "Bytes the value needs."), Field("given", Long, "Bytes given.")],
    },
    Class {
        kind: Some(ErrorKind::Io),
        name: "IreeIoException",
        parent: "IreeException",
        doc: "A file that could not be read (or a mapped buffer whose file shrank under it).",
        fields: &[Field("file", File, "The file.")],
    },
    Class {
        kind: Some(ErrorKind::ForeignValue),
        name: "IreeForeignValueException",
        parent: "IreeException",
        doc: "A value passed to a module that did not make it: values stay with the module (and device) that made \
              them; make it again with this module's `value`.",
        fields: &[Field("what", Text, "Which argument.")],
    },
    Class {
        kind: Some(ErrorKind::Usage),
        name: "IreeUsageException",
        parent: "IreeException",
        doc: "The API was used in a way it cannot serve (a closed handle, a negative dimension, a buffer that is not \
              direct or not writable); the message says which.",
        fields: &[],
    },
    Class {
        kind: Some(ErrorKind::Internal),
        name: "IreeInternalException",
        parent: "IreeException",
        doc: "A failure inside tapeout's native layer that is a bug (a JNI call failed, a native panic): please report \
              it with the message. The JVM keeps running.",
        fields: &[],
    },
];

impl ErrorKind {
    /// The number it crosses as: its class's position among the thrown classes.
    pub(crate) fn code(self) -> i32 {
        let thrown = CLASSES.iter().filter_map(|c| c.kind);
        thrown.enumerate().find(|(_, k)| *k == self).and_then(|(i, _)| i32::try_from(i).ok()).unwrap_or(-1)
    }

    /// Its class.
    #[cfg(test)]
    pub(crate) fn class(self) -> &'static Class {
        CLASSES.iter().find(|c| c.kind == Some(self)).unwrap_or(&CLASSES[0])
    }
}

#[cfg(test)]
fn kotlin_type(t: FieldType) -> &'static str {
    match t {
        Text => "String",
        File => "java.io.File",
        Texts => "List<String>",
        Int => "Int",
        Long => "Long",
        Status => "IreeStatusCode",
    }
}

/// The KDoc comment of `doc`, indented by `indent`.
#[cfg(test)]
fn kdoc(doc: &str, indent: &str) -> String {
    format!("{indent}/** {doc} */\n")
}

#[cfg(test)]
fn render_classes(out: &mut String) {
    *out += "/** Anything that goes wrong serving a module; the subclasses carry what it is about. The JVM keeps running. */\n\
             open class IreeException(message: String) : RuntimeException(message)\n";
    for c in CLASSES {
        let inherited = CLASSES.iter().find(|p| p.name == c.parent).map_or(0, |p| p.fields.len());
        let open = if CLASSES.iter().any(|o| o.parent == c.name) { "open " } else { "" };
        let params: Vec<String> = c
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let val = if i >= inherited { "val " } else { "" };
                format!("{}    {val}{}: {},\n", kdoc(f.2, "    "), f.0, kotlin_type(f.1))
            })
            .collect();
        let pass: Vec<&str> = c.fields.iter().take(inherited).map(|f| f.0).collect();
        let parent_args = std::iter::once("message").chain(pass).collect::<Vec<_>>().join(", ");
        *out += &format!("\n{}{open}class {}(\n    message: String,\n", kdoc(c.doc, ""), c.name);
        for p in params {
            *out += &p;
        }
        *out += &format!(") : {}({parent_args})\n", c.parent);
    }
    *out += "\n/** The typed exception of a native failure (see rust/iree-jni/src/contract.rs for the encoding). */\n\
             internal fun nativeException(kind: Int, message: String, texts: Array<String>, numbers: LongArray): IreeException {\n    \
             var t = 0\n    var n = 0\n    \
             fun text() = texts[t++]\n    fun number() = numbers[n++]\n    \
             fun list() = List(number().toInt()) { text() }\n    \
             return when (kind) {\n";
    for c in CLASSES {
        let Some(kind) = c.kind else { continue };
        let args: Vec<String> = std::iter::once("message".to_owned())
            .chain(c.fields.iter().map(|f| {
                match f.1 {
                    Text => "text()",
                    File => "java.io.File(text())",
                    Texts => "list()",
                    Int => "number().toInt()",
                    Long => "number()",
                    Status => "IreeStatusCode.of(number())",
                }
                .to_owned()
            }))
            .collect();
        *out += &format!("        {} -> {}({})\n", kind.code(), c.name, args.join(", "));
    }
    *out += "        else -> IreeInternalException(\"$message (native failure kind $kind)\")\n    }\n}\n";
}

/// The Kotlin side of the contract: `IreeContract.kt`.
#[cfg(test)]
pub(crate) fn kotlin() -> String {
    let mut out = String::from(
        "// Rendered from rust/iree-jni/src/contract.rs by `TAPEOUT_REGENERATE=1 cargo test -p tapeout-iree-jni`; do not\n\
         // edit. A test fails when this file and the native tables disagree.\n\
         package dev.tapeout.iree\n\n\
         /** Element types of values, as tapeout's modules use them: [bytes] per element, [mlir] its MLIR spelling. */\n\
         enum class IreeDType(internal val code: Int, val bytes: Int, val mlir: String) {\n",
    );
    for (code, row) in DTYPES.iter().enumerate() {
        let name = format!("{:?}", row.dtype).to_uppercase();
        out += &format!("    /** {} */\n    {name}({code}, {}, \"{}\"),\n", row.jvm, row.size, row.mlir);
    }
    out += "    ;\n\n    override fun toString() = mlir\n\n    internal companion object {\n        \
            fun of(code: Long): IreeDType? = entries.firstOrNull { it.code.toLong() == code }\n    }\n}\n\n\
            /** IREE's status codes (`iree_status_code_t`); [raw] is IREE's number. */\n\
            enum class IreeStatusCode(val raw: Int) {\n";
    for (code, raw, name) in STATUS_CODES {
        out += &format!("    /** `IREE_STATUS_{name}`{}. */\n    {name}({raw}),\n", unknown_note(code));
    }
    out += "    ;\n\n    internal companion object {\n        \
            fun of(raw: Long): IreeStatusCode = entries.firstOrNull { it.raw.toLong() == raw } ?: UNKNOWN\n    }\n}\n\n";
    render_classes(&mut out);
    out
}

#[cfg(test)]
fn unknown_note(code: tapeout_iree::StatusCode) -> &'static str {
    if code == tapeout_iree::StatusCode::Unknown { ", also any code this runtime does not know" } else { "" }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use super::*;

    const COMMITTED: &str =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../jvm-iree/src/main/kotlin/dev/tapeout/iree/IreeContract.kt");

    #[test]
    fn the_committed_kotlin_contract_is_the_rendered_one() {
        let want = kotlin();
        if std::env::var_os("TAPEOUT_REGENERATE").is_some() {
            std::fs::write(COMMITTED, &want).expect("write IreeContract.kt");
        }
        let have = std::fs::read_to_string(COMMITTED).unwrap_or_default();
        assert!(
            have == want,
            "{COMMITTED} is stale: regenerate it with `TAPEOUT_REGENERATE=1 cargo test -p tapeout-iree-jni` and commit it"
        );
    }

    #[test]
    fn every_kind_has_one_class_and_subclasses_have_their_parents_fields() {
        let thrown: Vec<ErrorKind> = CLASSES.iter().filter_map(|c| c.kind).collect();
        for (i, k) in thrown.iter().enumerate() {
            assert_eq!(k.code(), i32::try_from(i).unwrap());
            assert_eq!(thrown.iter().filter(|o| *o == k).count(), 1, "{k:?} twice");
        }
        for c in CLASSES.iter().filter(|c| c.parent != "IreeException") {
            let parent = CLASSES.iter().find(|p| p.name == c.parent).expect("a parent in the table");
            let names = |cl: &Class| cl.fields.iter().map(|f| (f.0, f.1)).collect::<Vec<_>>();
            assert!(names(c).starts_with(&names(parent)), "{} starts with its parent's fields", c.name);
        }
    }
}
