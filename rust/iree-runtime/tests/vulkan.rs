//! The `vulkan` device (IREE's Vulkan driver, built in by build.rs) on the machine's Vulkan driver (lavapipe, Mesa's
//! Vulkan on the CPU, where scripts/setup installed it): the numbers of local-task from a module compiled for
//! Vulkan, and a typed error naming the remedy where no Vulkan driver is found (a child process whose loader is
//! pointed at no driver).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod support;

use std::process::Command;

use support::{CPU, compile, f32_bytes, f32s};
use tapeout_iree::{DType, Device, Instance, IreeError, Parameters};
use tapeout_irpa::{ArchiveWriter, BytesSource};

/// y = tanh(x @ w + b) over a `?` batch, then y @ w again: w [4, 4] and b [4] parameters of scope "model".
const MLP: &str = r#"module @mlp {
  util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<4x4xf32>
  util.global private @b = #flow.parameter.named<"model"::"b"> : tensor<1x4xf32>
  func.func @main(%x: tensor<1x4xf32> {tapeout.name = "x"}) -> (tensor<1x4xf32> {tapeout.name = "y"}) {
    %w = util.global.load @w : tensor<4x4xf32>
    %b = util.global.load @b : tensor<1x4xf32>
    %h = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<1x4xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
    %hb = stablehlo.add %h, %b : tensor<1x4xf32>
    %t = stablehlo.tanh %hb : tensor<1x4xf32>
    %y = stablehlo.dot_general %t, %w, contracting_dims = [1] x [0] : (tensor<1x4xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
    return %y : tensor<1x4xf32>
  }
}
"#;

const W: [f32; 16] = [0.5, -0.25, 1.0, 0.75, -1.5, 0.125, 0.3, -0.6, 0.9, 0.2, -0.4, 1.1, 0.05, -0.8, 0.6, 0.35];
const B: [f32; 4] = [0.1, -0.2, 0.3, -0.4];

fn vulkan() -> Device {
    Instance::new().unwrap().device("vulkan", 0).unwrap_or_else(|e| {
        panic!("{e}\n(the tests need a Vulkan driver: scripts/setup installs Mesa's lavapipe, which runs on the CPU)")
    })
}

/// Ten steps of x <- main(x) on `device`, the state kept on the device between calls; every step's result.
fn run(device: &Device, vmfb: &[u8], archive: &std::path::Path) -> Vec<Vec<f32>> {
    let module = device.load(vmfb, &[Parameters::new("model", archive)]).unwrap();
    assert_eq!(module.function("main").unwrap().inputs[0].name, "x");
    let mut x = module.value(DType::F32, &[1, 4], &f32_bytes(&[1.0, -2.0, 0.5, 0.25])).unwrap();
    let mut steps = Vec::new();
    for _ in 0..10 {
        x = module.call("main", &[&x]).unwrap().remove(0);
        steps.push(f32s(&x.to_bytes().unwrap()));
    }
    steps
}

#[test]
fn a_module_compiled_for_vulkan_serves_the_numbers_of_the_cpu() {
    let instance = Instance::new().unwrap();
    assert!(instance.drivers().unwrap().contains(&"vulkan".to_owned()), "{:?}", instance.drivers());
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("mlp.irpa");
    let (w, b) = (f32_bytes(&W), f32_bytes(&B));
    let mut writer = ArchiveWriter::new();
    writer.add_data("w", BytesSource(&w)).unwrap();
    writer.add_data("b", BytesSource(&b)).unwrap();
    writer.write(&archive).unwrap();
    let on_vulkan = compile(dir.path(), "mlp-vulkan", MLP, &["--iree-hal-target-device=vulkan"]);
    let on_cpu = compile(dir.path(), "mlp-cpu", MLP, CPU);
    let gpu = vulkan();
    let cpu = instance.device("local-task", 2).unwrap();
    let (got, want) = (run(&gpu, &on_vulkan, &archive), run(&cpu, &on_cpu, &archive));
    // The same f32 arithmetic in another order (SPIR-V's tanh and sums against LLVM's): a few ulps apart.
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        for (i, (g, w)) in g.iter().zip(w).enumerate() {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "step {step} y[{i}]: vulkan {g}, local-task {w}");
        }
    }
    // Several modules on one Vulkan device, at once and after one another (IREE's Vulkan driver takes a device's
    // place in a device group once: the shim makes that group with the device, not with each module).
    let params = [Parameters::new("model", &archive)];
    let (a, b) = (gpu.load(&on_vulkan, &params).unwrap(), gpu.load(&on_vulkan, &params).unwrap());
    for m in [&a, &b, &a] {
        let x = m.value(DType::F32, &[1, 4], &f32_bytes(&[1.0, -2.0, 0.5, 0.25])).unwrap();
        assert_eq!(f32s(&m.call("main", &[&x]).unwrap()[0].to_bytes().unwrap()), got[0]);
    }
    drop((a, b));
    assert_eq!(run(&gpu, &on_vulkan, &archive), got, "a third load, after the others are gone");
    // Each device refuses the other's module, by name.
    let e = gpu.load(&on_cpu, &[Parameters::new("model", &archive)]).err().unwrap();
    assert!(matches!(&e, IreeError::WrongTarget { device, .. } if device == "vulkan"), "{e}");
    let e = cpu.load(&on_vulkan, &[Parameters::new("model", &archive)]).err().unwrap();
    assert!(matches!(&e, IreeError::WrongTarget { device, .. } if device == "local-task"), "{e}");
}

/// Set in the child process of the test below: the loader finds no Vulkan driver there.
const CHILD: &str = "TAPEOUT_TEST_NO_VULKAN_DRIVER";

#[test]
fn without_a_vulkan_driver_the_device_is_a_typed_error_naming_the_remedy() {
    if std::env::var_os(CHILD).is_some() {
        let instance = Instance::new().unwrap();
        let e = instance.device("vulkan", 0).expect_err("no Vulkan device without a driver");
        let IreeError::DeviceUnavailable { driver, uri, code, .. } = &e else { panic!("not DeviceUnavailable: {e:?}") };
        assert_eq!(
            (driver.as_str(), uri.as_str(), *code),
            ("vulkan", "vulkan", tapeout_iree::StatusCode::Unavailable),
            "{e}"
        );
        let text = e.to_string();
        for needle in ["'vulkan' device", "VK_ERROR_INCOMPATIBLE_DRIVER", "mesa-vulkan-drivers", "\"local-task\""] {
            assert!(text.contains(needle), "{needle:?} not in: {text}");
        }
        // The process goes on, and the CPU serves.
        let cpu = instance.device("local-task", 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let twice = "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %y = stablehlo.add %x, %x : tensor<2xf32>\n  \
                     return %y : tensor<2xf32>\n}\n";
        let module = cpu.load(&compile(dir.path(), "twice", twice, CPU), &[]).unwrap();
        let x = module.value(DType::F32, &[2], &f32_bytes(&[1.5, -3.0])).unwrap();
        assert_eq!(f32s(&module.call("main", &[&x]).unwrap()[0].to_bytes().unwrap()), vec![3.0, -6.0]);
        return;
    }
    // The Vulkan loader reads its driver list when an instance is made: a child process whose loader is given no
    // driver file (VK_DRIVER_FILES; VK_ICD_FILENAMES for loaders before 1.3.207) is a machine without a driver.
    let name = "without_a_vulkan_driver_the_device_is_a_typed_error_naming_the_remedy";
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && log.contains("1 passed"), "the child failed:\n{log}");
}
