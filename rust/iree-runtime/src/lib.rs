//! IREE's runtime in process, for modules tapeout exported and `iree-compile` compiled.
//!
//! ```no_run
//! use tapeout_iree::{Instance, Parameters, DType};
//! # fn main() -> Result<(), tapeout_iree::IreeError> {
//! let instance = Instance::new()?;
//! let device = instance.device("local-task", 2)?;
//! let vmfb = std::fs::read("model.vmfb").map_err(|e| tapeout_iree::IreeError::io("model.vmfb", e))?;
//! // The archive is memory-mapped: its pages are the parameters' buffers, never copied.
//! let module = device.load(&vmfb, &[Parameters::new("model", "model.irpa")])?;
//! let tokens = module.value(DType::I64, &[1, 3], &bytes_of(&[1i64, 2, 3]))?;
//! let logits = module.call("prefill", &[&tokens])?;
//! # fn bytes_of(v: &[i64]) -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() }
//! # Ok(()) }
//! ```
//!
//! The runtime is IREE 3.13's, built from source by this crate's build script with the `io_parameters` module
//! and the IRPA/GGUF/safetensors parsers; see build.rs. Every failure is an [`IreeError`] that names what and
//! where; argument checks against the module's own signature come before IREE sees a call.

mod ffi;
mod signature;
/// The integration tests' helpers, for the unit tests too.
#[cfg(test)]
#[path = "../tests/support/mod.rs"]
mod test_support;

use std::ffi::{CStr, CString, c_char};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use signature::{DType, Param, Signature, parse_declaration};

/// What can go wrong serving a module.
#[derive(Debug, thiserror::Error)]
pub enum IreeError {
    /// IREE refused an operation; `code` is IREE's status name (`INVALID_ARGUMENT`, ...).
    #[error("IREE failed {during}: {code}: {message}")]
    Runtime {
        /// What tapeout was doing.
        during: String,
        /// IREE's status code name.
        code: &'static str,
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
             --iree-hal-target-device matching this device (local-task and local-sync run llvm-cpu modules)"
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
}

impl IreeError {
    /// An [`IreeError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> IreeError {
        IreeError::Io { path: path.into(), source }
    }
}

/// IREE's status code names (iree/base/status.h).
fn code_name(code: i32) -> &'static str {
    const NAMES: [&str; 19] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
        "DEFERRED",
        "INCOMPATIBLE",
    ];
    usize::try_from(code).ok().and_then(|c| NAMES.get(c)).copied().unwrap_or("UNKNOWN")
}

/// A native failure: code name and message (freed here).
struct Native {
    code: &'static str,
    message: String,
}

/// Runs a shim call that returns a code and maybe sets a message.
fn native(call: impl FnOnce(*mut *mut c_char) -> i32) -> Result<(), Native> {
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
    if code == 0 { Ok(()) } else { Err(Native { code: code_name(code), message: text }) }
}

fn runtime(during: &str) -> impl FnOnce(Native) -> IreeError + '_ {
    move |n| IreeError::Runtime { during: during.to_owned(), code: n.code, message: n.message }
}

/// Takes a string the shim made (freeing it).
fn take_string(raw: *mut c_char) -> String {
    if raw.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string from the shim's malloc, freed once here.
    let text = unsafe { CStr::from_ptr(raw) }.to_string_lossy().into_owned();
    unsafe { ffi::tio_free_message(raw) };
    text
}

fn c_string(what: &str, text: &str) -> Result<CString, IreeError> {
    CString::new(text).map_err(|_| IreeError::Runtime {
        during: what.to_owned(),
        code: "INVALID_ARGUMENT",
        message: format!("{text:?} holds a NUL byte"),
    })
}

struct InstanceInner(*mut ffi::TioInstance);
// SAFETY: IREE's runtime instance is thread-safe (reference counted, immutable after creation).
unsafe impl Send for InstanceInner {}
unsafe impl Sync for InstanceInner {}
impl Drop for InstanceInner {
    fn drop(&mut self) {
        // SAFETY: created by tio_instance_create, released once.
        unsafe { ffi::tio_instance_release(self.0) }
    }
}

/// IREE's runtime instance: the registry of drivers. One per process is plenty.
#[derive(Clone)]
pub struct Instance {
    inner: Arc<InstanceInner>,
}

impl Instance {
    /// A new instance with every driver this runtime was built with.
    pub fn new() -> Result<Instance, IreeError> {
        let mut raw = ptr::null_mut();
        // SAFETY: out-pointers valid for the call.
        native(|m| unsafe { ffi::tio_instance_create(&mut raw, m) }).map_err(runtime("creating the instance"))?;
        Ok(Instance { inner: Arc::new(InstanceInner(raw)) })
    }

    /// The HAL drivers this runtime has (`local-sync`, `local-task`, ...).
    pub fn drivers(&self) -> Result<Vec<String>, IreeError> {
        let mut names = ptr::null_mut();
        // SAFETY: live instance, valid out-pointers.
        native(|m| unsafe { ffi::tio_instance_drivers(self.inner.0, &mut names, m) })
            .map_err(runtime("listing drivers"))?;
        Ok(take_string(names).lines().map(str::to_owned).collect())
    }

    /// A device: `local-task` (worker threads: `workers`, 0 for IREE's choice), `local-sync` (the calling thread),
    /// or another driver's URI where the runtime was built with it and a device exists.
    pub fn device(&self, uri: &str, workers: u32) -> Result<Device, IreeError> {
        let c_uri = c_string("creating a device", uri)?;
        let workers = i32::try_from(workers).map_err(|_| IreeError::Runtime {
            during: format!("creating device '{uri}'"),
            code: "INVALID_ARGUMENT",
            message: format!("{workers} workers is more than i32 holds"),
        })?;
        let mut raw = ptr::null_mut();
        // local-task takes its worker count from IREE's process-wide flags, set just before: one device at a time.
        static DEVICE_CREATION: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = DEVICE_CREATION.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: live instance, NUL-terminated uri, valid out-pointers.
        native(|m| unsafe { ffi::tio_device_create(self.inner.0, c_uri.as_ptr(), workers, &mut raw, m) }).map_err(
            |n| {
                let known = self.drivers().unwrap_or_default();
                IreeError::Runtime {
                    during: format!("creating device '{uri}' (this runtime has: {})", known.join(", ")),
                    code: n.code,
                    message: n.message,
                }
            },
        )?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                raw,
                uri: uri.to_owned(),
                instance: self.clone(),
                batch_waits: AtomicBool::new(true),
            }),
        })
    }
}

struct DeviceInner {
    raw: *mut ffi::TioDevice,
    uri: String,
    instance: Instance,
    /// Whether a thread waiting on this device's work waits under SCHED_BATCH ([`Device::set_batch_waits`]).
    batch_waits: AtomicBool,
}
// SAFETY: IREE HAL devices are thread-safe.
unsafe impl Send for DeviceInner {}
unsafe impl Sync for DeviceInner {}
impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: created by tio_device_create, released once.
        unsafe { ffi::tio_device_release(self.raw) }
    }
}

/// A HAL device.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

/// A parameter file and the scope a module names it by (`#flow.parameter.named<"model"::"key">` is scope
/// `model`; tapeout's default).
#[derive(Clone, Debug)]
pub struct Parameters {
    /// The scope, `""` for unscoped keys.
    pub scope: String,
    /// The .irpa (or .gguf / .safetensors) file.
    pub path: PathBuf,
}

impl Parameters {
    /// `path` under `scope`.
    pub fn new(scope: impl Into<String>, path: impl Into<PathBuf>) -> Parameters {
        Parameters { scope: scope.into(), path: path.into() }
    }

    /// Every file of an archive set tapeout wrote with a size limit, from its `<name>.irpa.index.json`
    /// (`{"format": "tapeout-irpa-index/1", "scope": …, "files": […]}`, files relative to the index), under the
    /// index's scope.
    pub fn from_index(index: impl AsRef<std::path::Path>) -> Result<Vec<Parameters>, IreeError> {
        let index = index.as_ref();
        let bad = |message: String| IreeError::ParameterFile { path: index.to_path_buf(), message };
        let text = std::fs::read_to_string(index).map_err(|e| IreeError::io(index, e))?;
        let doc: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| bad(format!("not JSON: {e}; pass the .irpa.index.json tapeout wrote")))?;
        if doc.get("format").and_then(|f| f.as_str()) != Some(INDEX_FORMAT) {
            return Err(bad(format!("not a tapeout archive index (its \"format\" is not \"{INDEX_FORMAT}\")")));
        }
        let scope = doc.get("scope").and_then(|s| s.as_str()).ok_or_else(|| bad("no \"scope\" string".into()))?;
        let files = doc.get("files").and_then(|f| f.as_array()).ok_or_else(|| bad("no \"files\" list".into()))?;
        let dir = index.parent().unwrap_or(std::path::Path::new("."));
        files
            .iter()
            .map(|f| {
                let name = f.as_str().ok_or_else(|| bad(format!("a file entry {f} is not a string")))?;
                Ok(Parameters::new(scope, dir.join(name)))
            })
            .collect()
    }
}

/// The `format` of a tapeout archive set's index.
pub const INDEX_FORMAT: &str = "tapeout-irpa-index/1";

impl Device {
    /// The URI it was created from.
    pub fn uri(&self) -> &str {
        &self.inner.uri
    }

    /// Whether a thread that waits on this device's work ([`Module::call`], [`Module::value`],
    /// [`Value::read_into`]) waits under Linux's SCHED_BATCH policy: on by default. IREE 3.13 ends a blocking wait
    /// by spinning until the worker thread that woke the waiter has finished; woken on that worker's CPU, the waiter
    /// preempts it and spins until the worker runs again. A SCHED_BATCH thread's wakeup does not preempt a normal or
    /// batch task, so the worker finishes first. The thread goes back to its own policy when the wait returns, and only a SCHED_OTHER thread
    /// is switched. Off gives IREE's own wait (what `serve_bench --batch-waits off` measures against); elsewhere
    /// than Linux, nothing changes.
    pub fn set_batch_waits(&self, on: bool) {
        self.inner.batch_waits.store(on, Ordering::Relaxed);
    }

    /// See [`Device::set_batch_waits`].
    pub fn batch_waits(&self) -> bool {
        self.inner.batch_waits.load(Ordering::Relaxed)
    }

    /// Loads a compiled module (its bytes are copied) with its parameter files, memory-mapped read-only: the
    /// device uses the files' pages in place where it can (the CPU devices can), so parameters are not copied.
    pub fn load(&self, vmfb: &[u8], parameters: &[Parameters]) -> Result<Module, IreeError> {
        for p in parameters {
            let meta = std::fs::metadata(&p.path).map_err(|e| IreeError::ParameterFile {
                path: p.path.clone(),
                message: format!("cannot open it: {e}"),
            })?;
            if !meta.is_file() {
                return Err(IreeError::ParameterFile { path: p.path.clone(), message: "not a file".into() });
            }
        }
        let scopes =
            parameters.iter().map(|p| c_string("loading a module", &p.scope)).collect::<Result<Vec<_>, _>>()?;
        let paths = parameters
            .iter()
            .map(|p| {
                use std::os::unix::ffi::OsStrExt;
                CString::new(p.path.as_os_str().as_bytes()).map_err(|_| IreeError::ParameterFile {
                    path: p.path.clone(),
                    message: "the path holds a NUL byte".into(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let scope_ptrs: Vec<*const c_char> = scopes.iter().map(|s| s.as_ptr()).collect();
        let path_ptrs: Vec<*const c_char> = paths.iter().map(|s| s.as_ptr()).collect();
        let mut raw = ptr::null_mut();
        // SAFETY: live instance and device; the byte slice and string arrays outlive the call.
        let result = native(|m| unsafe {
            ffi::tio_session_create(
                self.inner.instance.inner.0,
                self.inner.raw,
                vmfb.as_ptr(),
                vmfb.len(),
                parameters.len(),
                scope_ptrs.as_ptr(),
                path_ptrs.as_ptr(),
                &mut raw,
                m,
            )
        });
        result.map_err(|n| self.classify_load_failure(n, parameters))?;
        let session = Arc::new(SessionInner { raw, lock: std::sync::Mutex::new(()), device: self.clone() });
        let mut listing = ptr::null_mut();
        // SAFETY: live session, valid out-pointers.
        session
            .locked(|| native(|m| unsafe { ffi::tio_session_functions(session.raw, &mut listing, m) }))
            .map_err(runtime("listing the module's functions"))?;
        let mut functions = Vec::new();
        let mut unchecked = Vec::new();
        for line in take_string(listing).lines() {
            let Some((name, declaration)) = line.split_once('\t') else { continue };
            functions.push(parse_declaration(name, declaration).unwrap_or_else(|| {
                // A declaration this crate cannot read (not one iree-compile writes for tapeout's modules): its
                // calls go to IREE unchecked, and IREE's own checks answer.
                unchecked.push(name.to_owned());
                Signature {
                    name: name.to_owned(),
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    declaration: declaration.to_owned(),
                }
            }));
        }
        Ok(Module { session, functions, unchecked })
    }

    fn classify_load_failure(&self, n: Native, parameters: &[Parameters]) -> IreeError {
        let msg = n.message;
        let lower = msg.to_lowercase();
        if lower.contains("loading the compiled module") {
            return IreeError::NotAModule { what: "the module bytes".into(), message: msg };
        }
        for p in parameters {
            let path = p.path.to_string_lossy();
            if msg.contains(&format!("'{path}'")) {
                return IreeError::ParameterFile { path: p.path.clone(), message: msg };
            }
        }
        // "no parameter found in index with key 'k'" or, for a scope no file was given under,
        // "no provider registered that handles scopes like 's'".
        let no_scope = lower.contains("no provider registered");
        if n.code == "NOT_FOUND" && (no_scope || lower.contains("no parameter found")) {
            let quoted = msg.split('\'').nth(1).unwrap_or("(see message)");
            let key = if no_scope { format!("{quoted}::*") } else { quoted.to_owned() };
            return IreeError::MissingParameter { key, message: msg };
        }
        if n.code == "INCOMPATIBLE" || lower.contains("executable format") {
            return IreeError::WrongTarget { device: self.inner.uri.clone(), message: msg };
        }
        IreeError::Runtime { during: "loading the module".into(), code: n.code, message: msg }
    }
}

/// The calling thread under SCHED_BATCH for one wait on IREE's workers, back to its own policy when dropped
/// ([`Device::set_batch_waits`]).
struct BatchWait(i32, PhantomData<*const ()>);

#[cfg(test)]
thread_local! {
    /// How many waits this thread began with batch waits on (the tests' check that each entry point takes the guard).
    static BATCH_WAITS_BEGUN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl BatchWait {
    fn begin(device: &Device) -> BatchWait {
        if !device.batch_waits() {
            return BatchWait(0, PhantomData);
        }
        #[cfg(test)]
        BATCH_WAITS_BEGUN.with(|n| n.set(n.get() + 1));
        // SAFETY: no arguments; changes only the calling thread's scheduling policy.
        BatchWait(unsafe { ffi::tio_wait_begin() }, PhantomData)
    }
}

impl Drop for BatchWait {
    fn drop(&mut self) {
        // SAFETY: the value tio_wait_begin returned on this thread (the guard is not Send).
        unsafe { ffi::tio_wait_end(self.0) }
    }
}

struct SessionInner {
    raw: *mut ffi::TioSession,
    /// Held around every use of the session's VM context (calls): IREE's contexts are thread-compatible, not thread-safe.
    lock: std::sync::Mutex<()>,
    device: Device,
}

impl SessionInner {
    fn locked<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f()
    }
}
// SAFETY: every use of the session's VM context (calls, reflection) goes through `locked`, one thread at a time;
// values are made and read through its HAL device, which IREE makes thread-safe.
unsafe impl Send for SessionInner {}
unsafe impl Sync for SessionInner {}
impl Drop for SessionInner {
    fn drop(&mut self) {
        // SAFETY: created by tio_session_create, released once, after every value holding it.
        unsafe { ffi::tio_session_release(self.raw) }
    }
}

/// A compiled module loaded on a device with its parameters.
pub struct Module {
    session: Arc<SessionInner>,
    functions: Vec<Signature>,
    /// Functions whose declaration could not be read: called without tapeout's argument checks.
    unchecked: Vec<String>,
}

impl Module {
    /// Its exported functions.
    pub fn functions(&self) -> &[Signature] {
        &self.functions
    }

    /// The signature of function `name`.
    pub fn function(&self, name: &str) -> Result<&Signature, IreeError> {
        self.functions.iter().find(|f| f.name == name).ok_or_else(|| IreeError::NoSuchFunction {
            name: name.to_owned(),
            available: self.functions.iter().map(|f| f.name.clone()).collect(),
        })
    }

    /// A value on the module's device from little-endian host bytes (copied once, to the device).
    pub fn value(&self, dtype: DType, dims: &[u64], bytes: &[u8]) -> Result<Value, IreeError> {
        let shape = shape_text(dims);
        let too_big = || IreeError::Runtime {
            during: "creating a value".into(),
            code: "INVALID_ARGUMENT",
            message: format!("a {dtype} value of shape {shape} has more bytes or elements than 64 bits count"),
        };
        let expected = dims.iter().try_fold(dtype.size(), |acc, &d| acc.checked_mul(d)).ok_or_else(too_big)?;
        let given = u64::try_from(bytes.len()).map_err(|_| too_big())?;
        if expected != given {
            return Err(IreeError::Size { what: "a new value".into(), expected, given, dtype, shape });
        }
        // IREE's dimensions are signed 64-bit (a zero dimension elsewhere can make a huge one fit the bytes).
        let dims_i64 = dims.iter().map(|&d| i64::try_from(d)).collect::<Result<Vec<_>, _>>().map_err(|_| too_big())?;
        let mut raw = ptr::null_mut();
        // Not under the session lock: this allocates on and copies to the HAL device, which is thread-safe, and a
        // caller holding a pinned JVM array (the JNI layer) must not wait behind another thread's call.
        // The copy is a transfer the device queues and this thread waits on.
        let _wait = BatchWait::begin(&self.session.device);
        // SAFETY: live session (its device is read only); dims and bytes outlive the call (the shim copies them).
        native(|m| unsafe {
            ffi::tio_value_create(
                self.session.raw,
                dtype.code(),
                dims_i64.len(),
                dims_i64.as_ptr(),
                bytes.as_ptr().cast(),
                bytes.len(),
                &mut raw,
                m,
            )
        })
        .map_err(runtime("creating a value"))?;
        Ok(Value { raw, session: self.session.clone() })
    }

    /// Calls `function` with values on this module's device; its results stay on the device.
    /// Arity, element types and static dimensions are checked against the module's signature first.
    pub fn call(&self, function: &str, inputs: &[&Value]) -> Result<Vec<Value>, IreeError> {
        let signature = self.function(function)?;
        let checked = !self.unchecked.iter().any(|n| n == function);
        if checked && signature.inputs.len() != inputs.len() {
            return Err(IreeError::Arity {
                function: function.to_owned(),
                expected: signature.inputs.len(),
                given: inputs.len(),
                names: signature.inputs.iter().map(|p| p.name.clone()).collect(),
            });
        }
        for (index, value) in inputs.iter().enumerate() {
            if !Arc::ptr_eq(&value.session, &self.session) {
                let name = signature.inputs.get(index).map_or("?", |p| p.name.as_str());
                return Err(IreeError::ForeignValue { what: format!("{function} argument {index} '{name}'") });
            }
        }
        for (index, (param, value)) in signature.inputs.iter().zip(inputs).enumerate() {
            let given = value.dtype();
            if let Some(want) = param.dtype
                && given != Some(want)
            {
                return Err(IreeError::DType {
                    function: function.to_owned(),
                    index,
                    argument: param.name.clone(),
                    expected: want.to_string(),
                    given: given.map_or_else(|| "a type tapeout does not name".to_owned(), |d| d.to_string()),
                });
            }
            let dims = value.dims();
            if param.type_text.starts_with("tensor<") && !param.accepts_dims(&dims) {
                return Err(IreeError::Shape {
                    function: function.to_owned(),
                    index,
                    argument: param.name.clone(),
                    expected: param_shape(param),
                    given: shape_text(&dims),
                });
            }
        }
        let c_name = c_string("calling a function", function)?;
        let raw_inputs: Vec<*mut ffi::TioValue> = inputs.iter().map(|v| v.raw).collect();
        let capacity = signature.outputs.len().max(16);
        let mut outputs: Vec<*mut ffi::TioValue> = vec![ptr::null_mut(); capacity];
        let mut count = 0usize;
        // SAFETY: live session and values; arrays sized as passed.
        self.session
            .locked(|| {
                let _wait = BatchWait::begin(&self.session.device);
                native(|m| unsafe {
                    ffi::tio_call(
                        self.session.raw,
                        c_name.as_ptr(),
                        raw_inputs.len(),
                        raw_inputs.as_ptr(),
                        capacity,
                        outputs.as_mut_ptr(),
                        &mut count,
                        m,
                    )
                })
            })
            .map_err(|n| IreeError::Runtime {
                during: format!("calling {function}"),
                code: n.code,
                message: n.message,
            })?;
        Ok(outputs.into_iter().take(count).map(|raw| Value { raw, session: self.session.clone() }).collect())
    }
}

fn shape_text(dims: &[u64]) -> String {
    format!("[{}]", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
}

fn param_shape(param: &Param) -> String {
    let dims: Vec<String> = param.dims.iter().map(|d| d.map_or_else(|| "?".to_owned(), |d| d.to_string())).collect();
    format!("[{}]", dims.join(", "))
}

/// A tensor on the device (an IREE buffer view). Passing it to another call does not copy it.
pub struct Value {
    raw: *mut ffi::TioValue,
    session: Arc<SessionInner>,
}
// SAFETY: buffer views are reference counted and immutable in shape; reads go through the session's device.
unsafe impl Send for Value {}
unsafe impl Sync for Value {}
impl Drop for Value {
    fn drop(&mut self) {
        // SAFETY: a buffer view this Value owns one reference of.
        unsafe { ffi::tio_value_release(self.raw) }
    }
}

impl Value {
    /// Its element type, `None` for a type tapeout does not name.
    pub fn dtype(&self) -> Option<DType> {
        // SAFETY: live buffer view.
        DType::from_code(unsafe { ffi::tio_value_dtype(self.raw) })
    }

    /// Its dimensions.
    pub fn dims(&self) -> Vec<u64> {
        // SAFETY: live buffer view; axes below its rank.
        let rank = unsafe { ffi::tio_value_rank(self.raw) };
        (0..rank).map(|axis| unsafe { ffi::tio_value_dim(self.raw, axis) }).collect()
    }

    /// Its size in bytes.
    pub fn byte_len(&self) -> u64 {
        // SAFETY: live buffer view.
        unsafe { ffi::tio_value_byte_length(self.raw) }
    }

    /// Copies its bytes into `dst`, whose length must be [`Value::byte_len`].
    pub fn read_into(&self, dst: &mut [u8]) -> Result<(), IreeError> {
        let given = u64::try_from(dst.len()).unwrap_or(u64::MAX);
        if given != self.byte_len() {
            return Err(IreeError::Size {
                what: "reading a value".into(),
                expected: self.byte_len(),
                given,
                dtype: self.dtype().unwrap_or(DType::U8),
                shape: shape_text(&self.dims()),
            });
        }
        // Not under the session lock either (a HAL device transfer, thread-safe), for the same reason as in value.
        let _wait = BatchWait::begin(&self.session.device);
        // SAFETY: live session (its device is read only) and view; dst has exactly byte_len bytes.
        native(|m| unsafe { ffi::tio_value_read(self.session.raw, self.raw, dst.as_mut_ptr().cast(), dst.len(), m) })
            .map_err(runtime("reading a value"))
    }

    /// Its bytes, copied to the host.
    pub fn to_bytes(&self) -> Result<Vec<u8>, IreeError> {
        let len = usize::try_from(self.byte_len()).map_err(|_| IreeError::Size {
            what: "reading a value".into(),
            expected: self.byte_len(),
            given: 0,
            dtype: self.dtype().unwrap_or(DType::U8),
            shape: shape_text(&self.dims()),
        })?;
        let mut out = vec![0u8; len];
        self.read_into(&mut out)?;
        Ok(out)
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dtype = self.dtype().map_or_else(|| "?".to_owned(), |d| d.to_string());
        write!(f, "Value({dtype} {})", shape_text(&self.dims()))
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("functions", &self.functions.iter().map(|s| &s.name).collect::<Vec<_>>())
            .finish()
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.inner.uri)
    }
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Instance")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use super::{BATCH_WAITS_BEGUN, DType, Instance, ffi};
    #[cfg(target_os = "linux")]
    use crate::test_support::policy;
    use crate::test_support::{CPU, compile, f32_bytes};

    #[test]
    #[cfg(target_os = "linux")]
    fn a_wait_runs_under_sched_batch_and_the_thread_gets_its_policy_back() {
        // A fresh thread, so that no other test's policy leaks in (and none leaks out).
        std::thread::spawn(|| {
            let start = policy();
            // SAFETY (all four calls): no arguments; they change only this thread's policy.
            let switched = unsafe { ffi::tio_wait_begin() };
            if start != 0 {
                // The tests run under another policy (`chrt -b 0 cargo test`): the caller's choice, left alone.
                assert_eq!((switched, policy()), (0, start));
                return;
            }
            assert_eq!(switched, 1);
            assert_eq!(policy(), 3, "waiting under SCHED_BATCH");
            // A thread that is not SCHED_OTHER is the caller's choice: left alone, and left alone at the end.
            let nested = unsafe { ffi::tio_wait_begin() };
            assert_eq!(nested, 0);
            unsafe { ffi::tio_wait_end(nested) };
            assert_eq!(policy(), 3);
            unsafe { ffi::tio_wait_end(switched) };
            assert_eq!(policy(), 0, "back to SCHED_OTHER");
            // A policy someone else set during the wait (here SCHED_IDLE, by util-linux's chrt) is not undone.
            let switched = unsafe { ffi::tio_wait_begin() };
            assert_eq!((switched, policy()), (1, 3));
            let link = std::fs::read_link("/proc/thread-self").unwrap();
            let tid = link.file_name().unwrap().to_str().unwrap().to_owned();
            match std::process::Command::new("chrt").args(["-i", "-p", "0", &tid]).status() {
                Ok(status) if status.success() => {
                    assert_eq!(policy(), 5);
                    unsafe { ffi::tio_wait_end(switched) };
                    assert_eq!(policy(), 5, "SCHED_IDLE, set during the wait, stays");
                }
                other => {
                    eprintln!("chrt could not set SCHED_IDLE ({other:?}): that part is not checked");
                    unsafe { ffi::tio_wait_end(switched) };
                }
            }
        })
        .join()
        .unwrap();
    }

    /// Every entry point that waits on the device takes the guard when batch waits are on, and none when off.
    #[test]
    fn values_calls_and_reads_wait_under_the_guard_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let twice = "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = stablehlo.add %x, %x : tensor<4xf32>\n  \
                     return %y : tensor<4xf32>\n}\n";
        let vmfb = compile(dir.path(), "twice", twice, CPU);
        let device = Instance::new().unwrap().device("local-task", 2).unwrap();
        let module = device.load(&vmfb, &[]).unwrap();
        let begun = || BATCH_WAITS_BEGUN.with(std::cell::Cell::get);
        let bytes = f32_bytes(&[1.0, -2.0, 0.5, 8.0]);
        for on in [true, false] {
            device.set_batch_waits(on);
            let per_wait = u64::from(on);
            let before = begun();
            let x = module.value(DType::F32, &[4], &bytes).unwrap();
            assert_eq!(begun() - before, per_wait, "making a value (batch waits {on})");
            let y = module.call("main", &[&x]).unwrap();
            assert_eq!(begun() - before, 2 * per_wait, "a call (batch waits {on})");
            let got = y[0].to_bytes().unwrap();
            assert_eq!(begun() - before, 3 * per_wait, "a read (batch waits {on})");
            assert_eq!(got, f32_bytes(&[2.0, -4.0, 1.0, 16.0]));
        }
    }
}
