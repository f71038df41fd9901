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

mod archives;
mod cpu;
mod device;
mod error;
mod module;
mod value;
mod vmfb;
mod wait;

pub use cpu::{CpuTarget, HostFit, cpu_targets, host_fit};
pub use device::{Device, Instance, Parameters};
pub use error::{IreeError, STATUS_CODES, StatusCode};
pub use module::Module;
pub use signature::{DTYPES, DType, DTypeRow, DimAt, DimMismatch, DimRule, Param, Signature, parse_declaration};
pub use value::Value;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use super::{DType, Instance, ffi};
    #[cfg(target_os = "linux")]
    use crate::test_support::policy;
    use crate::test_support::{CPU, compile, f32_bytes};
    use crate::wait::BATCH_WAITS_BEGUN;

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
