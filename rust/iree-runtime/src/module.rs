//! A loaded module: its signature, values made for it, and calls.

use std::ptr;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{IreeError, StatusCode, c_string, native, runtime};
use crate::ffi;
use crate::signature::{DType, Param, Signature};
use crate::value::Value;
use crate::wait::BatchWait;

pub(crate) struct SessionInner {
    pub(crate) raw: *mut ffi::TioSession,
    /// Held around every use of the session's VM context (calls): IREE's contexts are thread-compatible, not thread-safe.
    pub(crate) lock: std::sync::Mutex<()>,
    pub(crate) device: Device,
}

impl SessionInner {
    pub(crate) fn locked<T>(&self, f: impl FnOnce() -> T) -> T {
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
    pub(crate) session: Arc<SessionInner>,
    pub(crate) functions: Vec<Signature>,
    /// Functions whose declaration could not be read: called without tapeout's argument checks.
    pub(crate) unchecked: Vec<String>,
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
            code: StatusCode::InvalidArgument,
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
                dtype.element_type(),
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
    /// Arity, element types and static dimensions are checked against the module's signature first, then the
    /// `?` dimensions its `tapeout.dims` says the graph requires equal ([`Signature::check_equal_dims`]).
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
        // `?` dims the graph requires equal: unchecked, IREE reads one argument at the other's extent.
        let given: Vec<Vec<u64>> = inputs.iter().map(|v| v.dims()).collect();
        signature.check_equal_dims(&given).map_err(|m| m.into_error(signature, &given))?;
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

pub(crate) fn shape_text(dims: &[u64]) -> String {
    format!("[{}]", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
}

pub(crate) fn param_shape(param: &Param) -> String {
    let dims: Vec<String> = param.dims.iter().map(|d| d.map_or_else(|| "?".to_owned(), |d| d.to_string())).collect();
    format!("[{}]", dims.join(", "))
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("functions", &self.functions.iter().map(|s| &s.name).collect::<Vec<_>>())
            .finish()
    }
}
