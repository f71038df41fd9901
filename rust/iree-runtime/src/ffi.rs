//! Hand-written declarations of native/tapeout_iree.h (kept in step with it by hand: a dozen functions, no
//! bindgen and so no libclang).

use std::ffi::{c_char, c_void};

/// `tio_instance`.
#[repr(C)]
pub struct TioInstance {
    _private: [u8; 0],
}
/// `tio_device`.
#[repr(C)]
pub struct TioDevice {
    _private: [u8; 0],
}
/// `tio_session`.
#[repr(C)]
pub struct TioSession {
    _private: [u8; 0],
}
/// `tio_value`.
#[repr(C)]
pub struct TioValue {
    _private: [u8; 0],
}

/// `TIO_PHASE_*`: the step of `tio_session_create` that failed.
pub const PHASE_MODULE: i32 = 1;
/// Making the VM context or the HAL module.
pub const PHASE_CONTEXT: i32 = 2;
/// A parameter file (which: the `file` out-parameter).
pub const PHASE_PARAMETERS: i32 = 3;
/// The module's initializers (parameters resolved, executables loaded).
pub const PHASE_INITIALIZE: i32 = 4;

unsafe extern "C" {
    pub fn tio_free_message(message: *mut c_char);
    pub fn tio_instance_create(out: *mut *mut TioInstance, message: *mut *mut c_char) -> i32;
    pub fn tio_instance_release(instance: *mut TioInstance);
    pub fn tio_instance_drivers(instance: *mut TioInstance, names: *mut *mut c_char, message: *mut *mut c_char) -> i32;
    pub fn tio_device_create(
        instance: *mut TioInstance,
        uri: *const c_char,
        workers: i32,
        out: *mut *mut TioDevice,
        message: *mut *mut c_char,
    ) -> i32;
    pub fn tio_device_release(device: *mut TioDevice);
    #[allow(clippy::too_many_arguments)]
    pub fn tio_session_create(
        instance: *mut TioInstance,
        device: *mut TioDevice,
        vmfb: *const u8,
        vmfb_length: usize,
        file_count: usize,
        scopes: *const *const c_char,
        paths: *const *const c_char,
        out: *mut *mut TioSession,
        phase: *mut i32,
        file: *mut usize,
        message: *mut *mut c_char,
    ) -> i32;
    pub fn tio_session_release(session: *mut TioSession);
    pub fn tio_session_functions(session: *mut TioSession, listing: *mut *mut c_char, message: *mut *mut c_char)
    -> i32;
    #[allow(clippy::too_many_arguments)]
    pub fn tio_value_create(
        session: *mut TioSession,
        element_type: u32,
        rank: usize,
        dims: *const i64,
        data: *const c_void,
        byte_length: usize,
        out: *mut *mut TioValue,
        message: *mut *mut c_char,
    ) -> i32;
    pub fn tio_value_release(value: *mut TioValue);
    pub fn tio_value_element_type(value: *const TioValue) -> u32;
    pub fn tio_value_rank(value: *const TioValue) -> usize;
    pub fn tio_value_dim(value: *const TioValue, axis: usize) -> u64;
    pub fn tio_value_byte_length(value: *const TioValue) -> u64;
    pub fn tio_value_read(
        session: *mut TioSession,
        value: *const TioValue,
        dst: *mut c_void,
        byte_length: usize,
        message: *mut *mut c_char,
    ) -> i32;
    pub fn tio_wait_begin() -> i32;
    pub fn tio_wait_end(switched: i32);
    #[allow(clippy::too_many_arguments)]
    pub fn tio_call(
        session: *mut TioSession,
        function: *const c_char,
        input_count: usize,
        inputs: *const *mut TioValue,
        output_capacity: usize,
        outputs: *mut *mut TioValue,
        out_count: *mut usize,
        message: *mut *mut c_char,
    ) -> i32;
}
