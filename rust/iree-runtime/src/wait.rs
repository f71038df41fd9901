//! Waiting on IREE's workers under SCHED_BATCH ([`crate::Device::set_batch_waits`]).

use std::marker::PhantomData;

use crate::device::Device;
use crate::ffi;

/// The calling thread under SCHED_BATCH for one wait on IREE's workers, back to its own policy when dropped
/// ([`Device::set_batch_waits`]).
pub(crate) struct BatchWait(pub(crate) i32, PhantomData<*const ()>);

#[cfg(test)]
thread_local! {
    /// How many waits this thread began with batch waits on (the tests' check that each entry point takes the guard).
    pub(crate) static BATCH_WAITS_BEGUN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl BatchWait {
    pub(crate) fn begin(device: &Device) -> BatchWait {
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
