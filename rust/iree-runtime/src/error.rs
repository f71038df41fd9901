//! What can go wrong serving a module ([`IreeError`]), and how IREE's statuses become it.

use std::ffi::{CStr, CString, c_char};
use std::path::PathBuf;
use std::ptr;

use crate::ffi;
use crate::signature::DType;

/// What can go wrong serving a module.
#[derive(Debug, thiserror::Error)]
pub enum IreeError {
    /// IREE refused an operation; `code` is IREE's status (`INVALID_ARGUMENT`, ...).
    #[error("IREE failed {during}: {code}: {message}")]
    Runtime {
        /// What tapeout was doing.
        during: String,
        /// IREE's status code.
        code: StatusCode,
        /// IREE's own message.
        message: String,
    },
    /// A driver this runtime has could not make a device on this machine: its system library (the Vulkan loader,
    /// say) or a device it drives is missing. The message says what to install, or to serve on the CPU instead.
    #[error("cannot create a '{driver}' device ('{uri}'): {code}: {message}; {}", remedy(driver))]
    DeviceUnavailable {
        /// The driver asked for (`vulkan`, the URI's scheme).
        driver: String,
        /// The device URI as given.
        uri: String,
        /// IREE's status code (`NOT_FOUND` for a missing loader or device, `UNAVAILABLE` for no driver).
        code: StatusCode,
        /// IREE's own message.
        message: String,
    },
    /// The bytes given as a compiled module are not an IREE module.
    #[error("{what} is not an IREE compiled module (.vmfb): {message}; compile the .mlir with iree-compile first")]
    NotAModule {
        /// Which bytes.
        what: String,
        /// IREE's message.
        message: String,
    },
    /// The module was compiled for a device this one is not.
    #[error(
        "the module was compiled for another device than '{device}': {message}; compile it with \
             --iree-hal-target-device matching this device (local-task and local-sync run llvm-cpu modules: \
             --iree-hal-target-device=local; vulkan runs --iree-hal-target-device=vulkan ones)"
    )]
    WrongTarget {
        /// The device the module was loaded on.
        device: String,
        /// IREE's message.
        message: String,
    },
    /// The module needs a parameter no given archive holds.
    #[error(
        "the module needs parameter {key} and no parameter file given holds it: {message}; pass the archive \
             exported with the module (its scope is the part before '::')"
    )]
    MissingParameter {
        /// The key IREE looked for (with its scope).
        key: String,
        /// IREE's message.
        message: String,
    },
    /// A parameter file could not be opened, mapped or indexed.
    #[error("parameter file {path}: {message}")]
    ParameterFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The module has no function of that name.
    #[error("the module has no function '{name}'; it has: {}", available.join(", "))]
    NoSuchFunction {
        /// The name asked for.
        name: String,
        /// The functions it has.
        available: Vec<String>,
    },
    /// A call with the wrong number of arguments.
    #[error("{function} takes {expected} argument(s) ({}), given {given}", names.join(", "))]
    Arity {
        /// The function.
        function: String,
        /// How many it takes.
        expected: usize,
        /// How many were given.
        given: usize,
        /// Their names.
        names: Vec<String>,
    },
    /// An argument of the wrong element type.
    #[error("{function} argument {index} '{argument}' is {expected}, given {given}")]
    DType {
        /// The function.
        function: String,
        /// The argument's position.
        index: usize,
        /// The argument's name.
        argument: String,
        /// The type it must have.
        expected: String,
        /// The type it was given.
        given: String,
    },
    /// An argument of the wrong shape.
    #[error("{function} argument {index} '{argument}' has shape {expected}, given {given}")]
    Shape {
        /// The function.
        function: String,
        /// The argument's position.
        index: usize,
        /// The argument's name.
        argument: String,
        /// Its shape (`?` where dynamic).
        expected: String,
        /// The shape given.
        given: String,
    },
    /// Host data whose size does not match the value's type and shape.
    #[error("{what}: {expected} bytes for {dtype} {shape}, given {given}")]
    Size {
        /// What the data was for.
        what: String,
        /// Bytes the value needs.
        expected: u64,
        /// Bytes given.
        given: u64,
        /// Its element type.
        dtype: DType,
        /// Its shape.
        shape: String,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A value from a module that is not this one.
    #[error("{what} belongs to another module; values stay with the module (and device) that made them")]
    ForeignValue {
        /// Which value.
        what: String,
    },
    /// The module's CPU code uses instructions this machine's CPU lacks: calling it would stop the process with
    /// SIGILL, so it is not loaded.
    #[error(
        "the module was compiled for CPU '{cpu}' with features this machine's CPU lacks: {}{}; calling it on \
         '{device}' would crash the process (SIGILL); recompile it with --iree-llvmcpu-target-cpu=host on this \
         machine, or with a lower --iree-llvmcpu-target-cpu (generic for any x86-64) and without those \
         --iree-llvmcpu-target-cpu-features",
        missing.join(", "),
        not_checked(unchecked)
    )]
    MissingCpuFeatures {
        /// The device the module was loaded on.
        device: String,
        /// LLVM's CPU name the module was compiled for.
        cpu: String,
        /// LLVM's names of the features the CPU lacks.
        missing: Vec<String>,
        /// Features of the target this runtime cannot test for.
        unchecked: Vec<String>,
    },
    /// Two parameter files under one scope hold the same key with different contents: IREE would silently use the
    /// first, so which file wins is not left to the order of the list.
    #[error(
        "parameter '{scope}::{key}' is in both {} and {}, with different contents ({detail}); give each key \
         once per scope: drop one of the files or load them under different scopes",
        first.display(),
        second.display()
    )]
    ConflictingParameter {
        /// The scope both files were given under.
        scope: String,
        /// The key.
        key: String,
        /// The file listed first.
        first: PathBuf,
        /// The other file.
        second: PathBuf,
        /// How they differ (sizes, or the first differing byte).
        detail: String,
    },
    /// Two `?` dimensions of a call's arguments that the function's graph requires equal (its `tapeout.dims`),
    /// given different extents: the module would read one tensor at the other's extent, out of bounds.
    #[error(
        "{function}: argument '{}' dimension {} is {} but argument '{}' dimension {} is {}; the graph requires them \
         equal (its ops read both at one extent): pass tensors whose extents agree there",
        first.0, first.1, first.2, second.0, second.1, second.2
    )]
    UnequalDims {
        /// The function.
        function: String,
        /// The argument name, dimension and extent of the first dimension of the class.
        first: (String, usize, u64),
        /// The same of one that differs from it.
        second: (String, usize, u64),
    },
}

/// ` (not checked: …)` for a non-empty list.
fn not_checked(unchecked: &[String]) -> String {
    if unchecked.is_empty() { String::new() } else { format!(" (not checked: {})", unchecked.join(", ")) }
}

impl IreeError {
    /// An [`IreeError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> IreeError {
        IreeError::Io { path: path.into(), source }
    }
}

/// What to do when a `driver` device cannot be created: install what it needs, or serve on the CPU.
pub(crate) fn remedy(driver: &str) -> String {
    let cpu = "or serve on \"local-task\" (the CPU) a module compiled for it (--iree-hal-target-device=local)";
    match driver {
        "vulkan" => format!(
            "install a Vulkan loader and driver (Debian/Ubuntu: apt install libvulkan1 mesa-vulkan-drivers, whose \
             lavapipe runs Vulkan on the CPU; or your GPU vendor's driver; `vulkaninfo --summary` lists the devices), \
             {cpu}"
        ),
        "cuda" => format!("install NVIDIA's driver (libcuda.so.1) on a machine with an NVIDIA GPU, {cpu}"),
        "hip" => format!("install AMD's ROCm runtime (libamdhip64.so) on a machine with an AMD GPU, {cpu}"),
        _ => format!("check that the '{driver}' driver's system libraries and devices are there, {cpu}"),
    }
}

/// IREE's status codes (`iree_status_code_t`, iree/base/status.h), the number the C shim returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusCode {
    /// `IREE_STATUS_CANCELLED`.
    Cancelled,
    /// `IREE_STATUS_UNKNOWN`, also any code this crate does not know.
    Unknown,
    /// `IREE_STATUS_INVALID_ARGUMENT`.
    InvalidArgument,
    /// `IREE_STATUS_DEADLINE_EXCEEDED`.
    DeadlineExceeded,
    /// `IREE_STATUS_NOT_FOUND`.
    NotFound,
    /// `IREE_STATUS_ALREADY_EXISTS`.
    AlreadyExists,
    /// `IREE_STATUS_PERMISSION_DENIED`.
    PermissionDenied,
    /// `IREE_STATUS_RESOURCE_EXHAUSTED`.
    ResourceExhausted,
    /// `IREE_STATUS_FAILED_PRECONDITION`.
    FailedPrecondition,
    /// `IREE_STATUS_ABORTED`.
    Aborted,
    /// `IREE_STATUS_OUT_OF_RANGE`.
    OutOfRange,
    /// `IREE_STATUS_UNIMPLEMENTED`.
    Unimplemented,
    /// `IREE_STATUS_INTERNAL`.
    Internal,
    /// `IREE_STATUS_UNAVAILABLE`.
    Unavailable,
    /// `IREE_STATUS_DATA_LOSS`.
    DataLoss,
    /// `IREE_STATUS_UNAUTHENTICATED`.
    Unauthenticated,
    /// `IREE_STATUS_DEFERRED`.
    Deferred,
    /// `IREE_STATUS_INCOMPATIBLE`.
    Incompatible,
}

/// Every status code but OK with IREE's number and name: the one table of them (the Kotlin `IreeStatusCode` enum
/// is rendered from it by the JNI crate's contract).
pub const STATUS_CODES: [(StatusCode, i32, &str); 18] = [
    (StatusCode::Cancelled, 1, "CANCELLED"),
    (StatusCode::Unknown, 2, "UNKNOWN"),
    (StatusCode::InvalidArgument, 3, "INVALID_ARGUMENT"),
    (StatusCode::DeadlineExceeded, 4, "DEADLINE_EXCEEDED"),
    (StatusCode::NotFound, 5, "NOT_FOUND"),
    (StatusCode::AlreadyExists, 6, "ALREADY_EXISTS"),
    (StatusCode::PermissionDenied, 7, "PERMISSION_DENIED"),
    (StatusCode::ResourceExhausted, 8, "RESOURCE_EXHAUSTED"),
    (StatusCode::FailedPrecondition, 9, "FAILED_PRECONDITION"),
    (StatusCode::Aborted, 10, "ABORTED"),
    (StatusCode::OutOfRange, 11, "OUT_OF_RANGE"),
    (StatusCode::Unimplemented, 12, "UNIMPLEMENTED"),
    (StatusCode::Internal, 13, "INTERNAL"),
    (StatusCode::Unavailable, 14, "UNAVAILABLE"),
    (StatusCode::DataLoss, 15, "DATA_LOSS"),
    (StatusCode::Unauthenticated, 16, "UNAUTHENTICATED"),
    (StatusCode::Deferred, 17, "DEFERRED"),
    (StatusCode::Incompatible, 18, "INCOMPATIBLE"),
];

impl StatusCode {
    /// The code of IREE's number `code` ([`StatusCode::Unknown`] for one this crate does not know, and for 0).
    pub fn from_raw(code: i32) -> StatusCode {
        STATUS_CODES.iter().find(|(_, n, _)| *n == code).map_or(StatusCode::Unknown, |(c, _, _)| *c)
    }

    /// IREE's name of it (`INVALID_ARGUMENT`).
    pub fn name(self) -> &'static str {
        STATUS_CODES.iter().find(|(c, _, _)| *c == self).map_or("UNKNOWN", |(_, _, n)| n)
    }

    /// IREE's number of it.
    pub fn raw(self) -> i32 {
        STATUS_CODES.iter().find(|(c, _, _)| *c == self).map_or(2, |(_, n, _)| *n)
    }
}

impl std::fmt::Display for StatusCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A native failure: code name and message (freed here).
pub(crate) struct Native {
    pub(crate) code: StatusCode,
    pub(crate) message: String,
}

/// Runs a shim call that returns a code and maybe sets a message.
pub(crate) fn native(call: impl FnOnce(*mut *mut c_char) -> i32) -> Result<(), Native> {
    let mut message: *mut c_char = ptr::null_mut();
    let code = call(&mut message);
    let text = if message.is_null() {
        String::new()
    } else {
        // SAFETY: the shim sets a NUL-terminated string from malloc, which we free once.
        let text = unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned();
        unsafe { ffi::tio_free_message(message) };
        text
    };
    if code == 0 { Ok(()) } else { Err(Native { code: StatusCode::from_raw(code), message: text }) }
}

pub(crate) fn runtime(during: &str) -> impl FnOnce(Native) -> IreeError + '_ {
    move |n| IreeError::Runtime { during: during.to_owned(), code: n.code, message: n.message }
}

/// Takes a string the shim made (freeing it).
pub(crate) fn take_string(raw: *mut c_char) -> String {
    if raw.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string from the shim's malloc, freed once here.
    let text = unsafe { CStr::from_ptr(raw) }.to_string_lossy().into_owned();
    unsafe { ffi::tio_free_message(raw) };
    text
}

pub(crate) fn c_string(what: &str, text: &str) -> Result<CString, IreeError> {
    CString::new(text).map_err(|_| IreeError::Runtime {
        during: what.to_owned(),
        code: StatusCode::InvalidArgument,
        message: format!("{text:?} holds a NUL byte"),
    })
}
