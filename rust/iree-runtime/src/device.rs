//! The runtime instance, its devices, and the parameter archives a module is loaded with.

use std::ffi::{CString, c_char};
use std::path::PathBuf;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{IreeError, Native, StatusCode, c_string, native, runtime, take_string};
use crate::ffi;
use crate::module::{Module, SessionInner};
use crate::signature::{Signature, parse_declaration};

pub(crate) struct InstanceInner(pub(crate) *mut ffi::TioInstance);
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
    pub(crate) inner: Arc<InstanceInner>,
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
    /// `vulkan` (the first Vulkan 1.3 device: IREE's Vulkan driver opens the system's Vulkan loader only now), or
    /// another driver's URI where the runtime was built with it.
    ///
    /// A driver this runtime has that finds no device here (no Vulkan loader, no Vulkan driver or device) is an
    /// [`IreeError::DeviceUnavailable`] saying what to install; a driver it lacks is an [`IreeError::Runtime`]
    /// listing those it has.
    pub fn device(&self, uri: &str, workers: u32) -> Result<Device, IreeError> {
        let c_uri = c_string("creating a device", uri)?;
        let workers = i32::try_from(workers).map_err(|_| IreeError::Runtime {
            during: format!("creating device '{uri}'"),
            code: StatusCode::InvalidArgument,
            message: format!("{workers} workers is more than i32 holds"),
        })?;
        let mut raw = ptr::null_mut();
        // local-task takes its worker count from IREE's process-wide flags, set just before: one device at a time.
        static DEVICE_CREATION: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = DEVICE_CREATION.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: live instance, NUL-terminated uri, valid out-pointers.
        native(|m| unsafe { ffi::tio_device_create(self.inner.0, c_uri.as_ptr(), workers, &mut raw, m) })
            .map_err(|n| self.classify_device_failure(uri, n))?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                raw,
                uri: uri.to_owned(),
                instance: self.clone(),
                batch_waits: AtomicBool::new(false),
            }),
        })
    }
}

/// Whether a status from creating a device of a driver this runtime has means the machine lacks what it needs:
/// IREE's Vulkan driver answers NOT_FOUND for a missing loader or no physical device, UNAVAILABLE for no
/// driver (`vkCreateInstance`: VK_ERROR_INCOMPATIBLE_DRIVER) or no device meeting Vulkan 1.3, FAILED_PRECONDITION
/// for VK_ERROR_INITIALIZATION_FAILED, OUT_OF_RANGE for a device index beyond those there are.
fn means_unavailable(code: StatusCode) -> bool {
    use StatusCode::*;
    matches!(code, NotFound | Unavailable | FailedPrecondition | OutOfRange | Incompatible)
}

impl Instance {
    /// The error for a failed `tio_device_create` of `uri`.
    pub(crate) fn classify_device_failure(&self, uri: &str, n: Native) -> IreeError {
        let known = self.drivers().unwrap_or_default();
        // `vulkan`, `vulkan://<path>`, `local-task?…`: the driver is the URI's scheme.
        let driver = uri.split("://").next().unwrap_or(uri).split('?').next().unwrap_or(uri);
        if known.iter().any(|d| d == driver) && means_unavailable(n.code) {
            return IreeError::DeviceUnavailable {
                driver: driver.to_owned(),
                uri: uri.to_owned(),
                code: n.code,
                message: n.message,
            };
        }
        IreeError::Runtime {
            during: format!("creating device '{uri}' (this runtime has: {})", known.join(", ")),
            code: n.code,
            message: n.message,
        }
    }
}

pub(crate) struct DeviceInner {
    pub(crate) raw: *mut ffi::TioDevice,
    pub(crate) uri: String,
    pub(crate) instance: Instance,
    /// Whether a thread waiting on this device's work waits under SCHED_BATCH ([`Device::set_batch_waits`]).
    pub(crate) batch_waits: AtomicBool,
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
    pub(crate) inner: Arc<DeviceInner>,
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
    /// [`Value::read_into`](crate::Value::read_into)) waits under Linux's SCHED_BATCH policy: on by default. IREE
    /// 3.13 ends a blocking wait by spinning until the worker thread that woke the waiter has finished; woken on that
    /// worker's CPU, the waiter preempts it and spins until the worker runs again. A SCHED_BATCH thread's wakeup does
    /// not preempt a normal or batch task, so the worker finishes first. The thread goes back to its own policy when
    /// the wait returns, and only a SCHED_OTHER thread is switched. Off gives IREE's own wait (what `serve_bench
    /// --batch-waits off` measures against); elsewhere than Linux, nothing changes.
    pub fn set_batch_waits(&self, on: bool) {
        self.inner.batch_waits.store(on, Ordering::Relaxed);
    }

    /// See [`Device::set_batch_waits`].
    pub fn batch_waits(&self) -> bool {
        self.inner.batch_waits.load(Ordering::Relaxed)
    }

    /// Loads a compiled module (its bytes are copied) with its parameter files, memory-mapped read-only: the
    /// device uses the files' pages in place where it can (the CPU devices can), so parameters are not copied.
    ///
    /// Before IREE sees them, the module's container is checked ([`IreeError::NotAModule`]), its CPU code against
    /// this machine's CPU on a `local-*` device ([`IreeError::MissingCpuFeatures`]), each parameter file's index
    /// ([`IreeError::ParameterFile`]), and every key two files of one scope share for equal contents
    /// ([`IreeError::ConflictingParameter`]): IREE crashes on some of what these refuse.
    pub fn load(&self, vmfb: &[u8], parameters: &[Parameters]) -> Result<Module, IreeError> {
        crate::vmfb::check_structure(vmfb)?;
        crate::cpu::check_host(vmfb, &self.inner.uri)?;
        for p in parameters {
            let meta = std::fs::metadata(&p.path).map_err(|e| IreeError::ParameterFile {
                path: p.path.clone(),
                message: format!("cannot open it: {e}"),
            })?;
            if !meta.is_file() {
                return Err(IreeError::ParameterFile { path: p.path.clone(), message: "not a file".into() });
            }
        }
        crate::archives::check(parameters)?;
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
        let (mut phase, mut file) = (0i32, 0usize);
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
                &mut phase,
                &mut file,
                m,
            )
        });
        result.map_err(|n| self.classify_load_failure(n, phase, parameters.get(file)))?;
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

    /// The error for a failed `tio_session_create`, typed by the step that failed (`phase`); `file` is the parameter
    /// file the shim was on when that step is the parameters'.
    pub(crate) fn classify_load_failure(&self, n: Native, phase: i32, file: Option<&Parameters>) -> IreeError {
        let msg = n.message;
        match phase {
            ffi::PHASE_MODULE => IreeError::NotAModule { what: "the module bytes".into(), message: msg },
            ffi::PHASE_PARAMETERS => match file {
                Some(p) => IreeError::ParameterFile { path: p.path.clone(), message: msg },
                None => {
                    IreeError::Runtime { during: "indexing the parameter files".into(), code: n.code, message: msg }
                }
            },
            ffi::PHASE_INITIALIZE => self.classify_initializer_failure(n.code, msg),
            ffi::PHASE_CONTEXT => {
                IreeError::Runtime { during: "making the module's VM context".into(), code: n.code, message: msg }
            }
            _ => IreeError::Runtime { during: "loading the module".into(), code: n.code, message: msg },
        }
    }

    /// A module's initializers failed: they resolve its parameters (a key no file holds, or a scope no file was
    /// given under: NOT_FOUND) and load its executables on the device (none the device can run: the module was
    /// compiled for another device).
    fn classify_initializer_failure(&self, code: StatusCode, msg: String) -> IreeError {
        // IREE says "does not support any variant of executable" (NOT_FOUND too) or "HAL device … not found or
        // unavailable" for a module of another device; the two parameter cases name the key or scope in quotes.
        let wrong_device = msg.contains("does not support any variant") || msg.contains("not found or unavailable");
        if code == StatusCode::Incompatible || wrong_device {
            return IreeError::WrongTarget { device: self.inner.uri.clone(), message: msg };
        }
        if code == StatusCode::NotFound {
            let no_scope = msg.contains("no provider registered");
            let quoted = msg.split('\'').nth(1).unwrap_or("(see message)");
            let key = if no_scope { format!("{quoted}::*") } else { quoted.to_owned() };
            return IreeError::MissingParameter { key, message: msg };
        }
        IreeError::Runtime { during: "initializing the module".into(), code, message: msg }
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

    use super::Instance;
    use crate::error::{IreeError, Native, StatusCode};

    /// IREE's statuses for a machine without a Vulkan loader (seen with libvulkan.so.1 hidden in a mount namespace)
    /// and for a driver this runtime lacks: only the first is the machine's lack.
    #[test]
    fn a_missing_vulkan_loader_is_device_unavailable_and_an_unknown_driver_is_not() {
        let instance = Instance::new().unwrap();
        let loader = "iree/runtime/src/iree/hal/drivers/vulkan/util/libvulkan.c:635: NOT_FOUND; Vulkan loader \
                      library not found; ensure it is installed and on a valid search path (or specified with \
                      IREE_HAL_VULKAN_LIBVULKAN_PATH): \n  Tried: libvulkan.so.1\n    failed to load dynamic library";
        let e =
            instance.classify_device_failure("vulkan", Native { code: StatusCode::NotFound, message: loader.into() });
        let IreeError::DeviceUnavailable { driver, uri, code, .. } = &e else { panic!("{e:?}") };
        assert_eq!((driver.as_str(), uri.as_str(), *code), ("vulkan", "vulkan", StatusCode::NotFound));
        let text = e.to_string();
        for needle in
            ["'vulkan' device", "Vulkan loader library not found", "libvulkan1 mesa-vulkan-drivers", "\"local-task\""]
        {
            assert!(text.contains(needle), "{needle:?} not in: {text}");
        }
        let e =
            instance.classify_device_failure("vulkan://9", Native { code: StatusCode::NotFound, message: "no".into() });
        assert!(matches!(&e, IreeError::DeviceUnavailable { driver, .. } if driver == "vulkan"), "{e:?}");
        // A driver the runtime does not have, and a failure that is not the machine's: IREE's own error.
        let e = instance.classify_device_failure("metal", Native { code: StatusCode::NotFound, message: "no".into() });
        assert!(matches!(&e, IreeError::Runtime { during, .. } if during.contains("local-task")), "{e:?}");
        let e = instance
            .classify_device_failure("vulkan", Native { code: StatusCode::InvalidArgument, message: "x".into() });
        assert!(matches!(e, IreeError::Runtime { .. }), "{e:?}");
    }
}
