//! The runtime against modules iree-compile (PyPI iree-base-compiler 3.13, the project's .venv) compiled here:
//! numbers checked against arithmetic done in the test, parameters from archives tapeout-irpa wrote, and every
//! kind of bad input answered with its typed error.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod support;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use support::{CPU, compile, f32_bytes, f32s, policy};

use tapeout_iree::{DType, Device, Instance, IreeError, Parameters};
use tapeout_irpa::{ArchiveWriter, BytesSource};

fn device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| Instance::new().unwrap().device("local-task", 2).unwrap())
}

/// y = x * w + b over a `?` batch, w and b external parameters of scope "model".
const AFFINE: &str = r#"module @affine {
  util.global private @w = #flow.parameter.named<"model"::"layer.w"> : tensor<5xf32>
  util.global private @b = #flow.parameter.named<"model"::"layer.b"> : tensor<5xf32>
  func.func @main(%x: tensor<?x5xf32> {tapeout.name = "x"}) -> (tensor<?x5xf32> {tapeout.name = "y"}) {
    %w = util.global.load @w : tensor<5xf32>
    %b = util.global.load @b : tensor<5xf32>
    %c0 = arith.constant 0 : index
    %n = tensor.dim %x, %c0 : tensor<?x5xf32>
    %ni = arith.index_cast %n : index to i32
    %five = arith.constant dense<5> : tensor<1xi32>
    %ns = tensor.from_elements %ni : tensor<1xi32>
    %shape = stablehlo.concatenate %ns, %five, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %wb = stablehlo.dynamic_broadcast_in_dim %w, %shape, dims = [1] : (tensor<5xf32>, tensor<2xi32>) -> tensor<?x5xf32>
    %bb = stablehlo.dynamic_broadcast_in_dim %b, %shape, dims = [1] : (tensor<5xf32>, tensor<2xi32>) -> tensor<?x5xf32>
    %m = stablehlo.multiply %x, %wb : tensor<?x5xf32>
    %y = stablehlo.add %m, %bb : tensor<?x5xf32>
    return %y : tensor<?x5xf32>
  }
}
"#;

const W: [f32; 5] = [1.5, -2.0, 0.25, 3.0, 0.5];
const B: [f32; 5] = [0.1, 0.2, -0.3, 0.4, 100.0];

fn affine(dir: &Path) -> (Vec<u8>, PathBuf) {
    let vmfb = compile(dir, "affine", AFFINE, CPU);
    let archive = dir.join("affine.irpa");
    let (w, b) = (f32_bytes(&W), f32_bytes(&B));
    let mut writer = ArchiveWriter::new();
    writer.add_data("layer.w", BytesSource(&w)).unwrap();
    writer.add_data("layer.b", BytesSource(&b)).unwrap();
    writer.write(&archive).unwrap();
    (vmfb, archive)
}

#[test]
fn serves_a_module_with_mapped_parameters_at_several_batch_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let (vmfb, archive) = affine(dir.path());
    let module = device().load(&vmfb, &[Parameters::new("model", &archive)]).unwrap();
    let main = module.function("main").unwrap();
    assert_eq!(main.inputs[0].name, "x");
    assert_eq!(main.inputs[0].dims, vec![None, Some(5)]);
    assert_eq!(main.outputs[0].name, "y");
    for rows in [1u64, 3, 7] {
        let x: Vec<f32> = (0..rows * 5).map(|i| i as f32 * 0.5 - 3.0).collect();
        let input = module.value(DType::F32, &[rows, 5], &f32_bytes(&x)).unwrap();
        let out = module.call("main", &[&input]).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].dims(), vec![rows, 5]);
        assert_eq!(out[0].dtype(), Some(DType::F32));
        let y = f32s(&out[0].to_bytes().unwrap());
        for (i, (got, xi)) in y.iter().zip(&x).enumerate() {
            let want = xi * W[i % 5] + B[i % 5];
            assert_eq!(*got, want, "rows {rows} element {i}");
        }
    }
}

/// A value returned by one call goes into the next without coming back to the host (the KV-cache pattern).
#[test]
fn results_stay_on_the_device_between_calls() {
    let dir = tempfile::tempdir().unwrap();
    let (vmfb, archive) = affine(dir.path());
    let module = device().load(&vmfb, &[Parameters::new("model", &archive)]).unwrap();
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    let mut value = module.value(DType::F32, &[1, 5], &f32_bytes(&x)).unwrap();
    let mut want = x.to_vec();
    for _ in 0..4 {
        value = module.call("main", &[&value]).unwrap().remove(0);
        for (i, w) in want.iter_mut().enumerate() {
            *w = *w * W[i] + B[i];
        }
    }
    assert_eq!(f32s(&value.to_bytes().unwrap()), want);
}

#[test]
fn wrong_calls_are_typed_errors_naming_the_argument() {
    let dir = tempfile::tempdir().unwrap();
    let (vmfb, archive) = affine(dir.path());
    let module = device().load(&vmfb, &[Parameters::new("model", &archive)]).unwrap();
    let good = module.value(DType::F32, &[2, 5], &[0u8; 40]).unwrap();
    let wrong_dtype = module.value(DType::I32, &[2, 5], &[0u8; 40]).unwrap();
    let wrong_shape = module.value(DType::F32, &[2, 4], &[0u8; 32]).unwrap();
    let wrong_rank = module.value(DType::F32, &[10], &[0u8; 40]).unwrap();

    let e = module.call("main", &[]).unwrap_err();
    assert!(matches!(e, IreeError::Arity { expected: 1, given: 0, .. }), "{e}");
    assert!(e.to_string().contains("x"), "{e}");
    let e = module.call("main", &[&good, &good]).unwrap_err();
    assert!(matches!(e, IreeError::Arity { expected: 1, given: 2, .. }), "{e}");
    let e = module.call("main", &[&wrong_dtype]).unwrap_err();
    assert!(
        matches!(&e, IreeError::DType { argument, expected, given, .. }
        if argument == "x" && expected == "f32" && given == "i32"),
        "{e}"
    );
    let e = module.call("main", &[&wrong_shape]).unwrap_err();
    assert!(
        matches!(&e, IreeError::Shape { argument, expected, given, .. }
        if argument == "x" && expected == "[?, 5]" && given == "[2, 4]"),
        "{e}"
    );
    let e = module.call("main", &[&wrong_rank]).unwrap_err();
    assert!(matches!(e, IreeError::Shape { .. }), "{e}");
    let e = module.call("prefill", &[&good]).unwrap_err();
    assert!(matches!(&e, IreeError::NoSuchFunction { available, .. } if available == &["main".to_owned()]), "{e}");
    let e = module.value(DType::F32, &[2, 5], &[0u8; 39]).unwrap_err();
    assert!(matches!(e, IreeError::Size { expected: 40, given: 39, .. }), "{e}");

    // A value of another module is refused, not passed to IREE.
    let other = device().load(&vmfb, &[Parameters::new("model", &archive)]).unwrap();
    let foreign = other.value(DType::F32, &[2, 5], &[0u8; 40]).unwrap();
    let e = module.call("main", &[&foreign]).unwrap_err();
    assert!(matches!(e, IreeError::ForeignValue { .. }), "{e}");
    // And the module still works after all of that.
    assert_eq!(module.call("main", &[&good]).unwrap().len(), 1);
}

#[test]
fn bad_modules_and_archives_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (vmfb, archive) = affine(dir.path());
    let params = [Parameters::new("model", &archive)];

    let e = device().load(b"this is not a vmfb at all, just text", &params).err().unwrap();
    assert!(matches!(e, IreeError::NotAModule { .. }), "{e}");
    let e = device().load(&vmfb[..vmfb.len() / 2], &params).err().unwrap();
    assert!(matches!(e, IreeError::NotAModule { .. }), "{e}");
    let e = device().load(&[], &params).err().unwrap();
    assert!(matches!(e, IreeError::NotAModule { .. }), "{e}");

    // No archive at all, an archive under the wrong scope, an archive missing one key.
    let e = device().load(&vmfb, &[]).err().unwrap();
    assert!(matches!(&e, IreeError::MissingParameter { key, .. } if key == "model::*"), "{e}");
    let e = device().load(&vmfb, &[Parameters::new("other", &archive)]).err().unwrap();
    assert!(matches!(&e, IreeError::MissingParameter { key, .. } if key == "model::*"), "{e}");
    let partial = dir.path().join("partial.irpa");
    let w = f32_bytes(&W);
    let mut writer = ArchiveWriter::new();
    writer.add_data("layer.w", BytesSource(&w)).unwrap();
    writer.write(&partial).unwrap();
    let e = device().load(&vmfb, &[Parameters::new("model", &partial)]).err().unwrap();
    assert!(matches!(&e, IreeError::MissingParameter { key, .. } if key == "layer.b"), "{e}");

    // A truncated archive, a file that is not an archive, a file that is not there.
    let bytes = std::fs::read(&archive).unwrap();
    let b_at = bytes.windows(20).position(|w| w == f32_bytes(&B)).unwrap();
    let cuts: [(&str, &[u8]); 4] = [
        ("cut-in-data.irpa", &bytes[..b_at + 10]),
        ("cut-in-index.irpa", &bytes[..40]),
        ("garbage.irpa", b"IRPA? no."),
        ("empty.irpa", b""),
    ];
    for (name, content) in cuts {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let e = match device().load(&vmfb, &[Parameters::new("model", &path)]) {
            Ok(m) => {
                let x = m.value(DType::F32, &[1, 5], &[0u8; 20]).unwrap();
                panic!(
                    "{name} ({} of {} bytes) loaded; call: {:?}",
                    content.len(),
                    bytes.len(),
                    m.call("main", &[&x]).map(|v| v[0].to_bytes())
                );
            }
            Err(e) => e,
        };
        assert!(matches!(&e, IreeError::ParameterFile { path: p, .. } if p == &path), "{name}: {e}");
    }
    let missing = dir.path().join("absent.irpa");
    let e = device().load(&vmfb, &[Parameters::new("model", &missing)]).err().unwrap();
    assert!(matches!(e, IreeError::ParameterFile { .. }), "{e}");
}

#[test]
fn a_module_for_another_target_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mlir = r#"module @m {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = stablehlo.add %x, %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
"#;
    let vmfb = compile(dir.path(), "vulkan", mlir, &["--iree-hal-target-device=vulkan"]);
    let e = match device().load(&vmfb, &[]) {
        Ok(m) => {
            let x = m.value(DType::F32, &[4], &[0u8; 16]).unwrap();
            panic!("loaded; call: {:?}", m.call("main", &[&x]).map(|v| v.len()));
        }
        Err(e) => e,
    };
    assert!(matches!(e, IreeError::WrongTarget { .. }), "{e}");
}

#[test]
fn local_sync_and_the_driver_list() {
    let instance = Instance::new().unwrap();
    let drivers = instance.drivers().unwrap();
    assert!(drivers.contains(&"local-sync".to_owned()) && drivers.contains(&"local-task".to_owned()), "{drivers:?}");
    let dir = tempfile::tempdir().unwrap();
    let (vmfb, archive) = affine(dir.path());
    let sync = instance.device("local-sync", 0).unwrap();
    let module = sync.load(&vmfb, &[Parameters::new("model", &archive)]).unwrap();
    let x = module.value(DType::F32, &[1, 5], &f32_bytes(&[0.0; 5])).unwrap();
    assert_eq!(f32s(&module.call("main", &[&x]).unwrap()[0].to_bytes().unwrap()), B.to_vec());
    let e = instance.device("no-such-driver", 0).err().unwrap();
    assert!(e.to_string().contains("local-task"), "the error lists the drivers there are: {e}");
}

/// The process's `name:` line of /proc/self/status, in bytes.
fn status_bytes(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// A 64 MiB parameter is used from the archive's own pages: after loading and a call that reads all of it, the
/// process's file-backed RSS grew by about the archive and its anonymous RSS by far less (the CPU device imports
/// the mapped file instead of reading it into new memory).
#[test]
fn parameters_are_used_in_place_from_the_mapped_archive() {
    const K: usize = 1024;
    const N: usize = 16384;
    let dir = tempfile::tempdir().unwrap();
    let mlir = format!(
        r#"module @big {{
  util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<{K}x{N}xf32>
  func.func @main(%x: tensor<1x{K}xf32> {{tapeout.name = "x"}}) -> (tensor<1x{N}xf32> {{tapeout.name = "y"}}) {{
    %w = util.global.load @w : tensor<{K}x{N}xf32>
    %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<1x{K}xf32>, tensor<{K}x{N}xf32>) -> tensor<1x{N}xf32>
    return %y : tensor<1x{N}xf32>
  }}
}}
"#
    );
    let vmfb = compile(dir.path(), "big", &mlir, CPU);
    let archive = dir.path().join("big.irpa");
    {
        // w[i][j] = (i + j) % 5, small integers: every sum below is exact in f32.
        let w: Vec<u8> = (0..K * N).flat_map(|e| (((e / N + e % N) % 5) as f32).to_le_bytes()).collect();
        let mut writer = ArchiveWriter::new();
        writer.add_data("w", BytesSource(&w)).unwrap();
        writer.write(&archive).unwrap();
    }
    let (file0, anon0) = (status_bytes("RssFile"), status_bytes("RssAnon"));
    let module = device().load(&vmfb, &[Parameters::new("model", &archive)]).unwrap();
    let x = module.value(DType::F32, &[1, K as u64], &f32_bytes(&[1.0; K])).unwrap();
    let y = f32s(&module.call("main", &[&x]).unwrap()[0].to_bytes().unwrap());
    for j in [0, 1, 7, N - 1] {
        let want: f32 = (0..K).map(|i| ((i + j) % 5) as f32).sum();
        assert_eq!(y[j], want, "column {j}");
    }
    let (file1, anon1) = (status_bytes("RssFile"), status_bytes("RssAnon"));
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let (file_growth, anon_growth) = (file1.saturating_sub(file0), anon1.saturating_sub(anon0));
    assert!(
        file_growth >= 60 << 20,
        "file-backed RSS grew {:.1} MiB for a 64 MiB archive (anonymous {:.1} MiB)",
        mib(file_growth),
        mib(anon_growth)
    );
    assert!(anon_growth <= 24 << 20, "anonymous RSS grew {:.1} MiB: the parameter was copied", mib(anon_growth));
}

/// An archive set (tapeout's `--max-archive-bytes` form): one file per parameter here, loaded from its index.
#[test]
fn an_archive_set_loads_from_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let vmfb = compile(dir.path(), "affine", AFFINE, CPU);
    let (w, b) = (f32_bytes(&W), f32_bytes(&B));
    let mut writer = ArchiveWriter::new();
    writer.add_data("layer.w", BytesSource(&w)).unwrap();
    writer.add_data("layer.b", BytesSource(&b)).unwrap();
    let shards = writer.split(100).unwrap();
    assert_eq!(shards.len(), 2);
    let names: Vec<String> = (1..=2).map(|k| format!("affine-{k:05}-of-00002.irpa")).collect();
    for (shard, name) in shards.into_iter().zip(&names) {
        shard.write(dir.path().join(name)).unwrap();
    }
    let index = dir.path().join("affine.irpa.index.json");
    std::fs::write(
        &index,
        format!(r#"{{"format":"tapeout-irpa-index/1","scope":"model","total_size":0,"files":["{}","{}"],"weight_map":{{}}}}"#, names[0], names[1]),
    )
    .unwrap();
    let params = Parameters::from_index(&index).unwrap();
    assert_eq!(params.len(), 2);
    let module = device().load(&vmfb, &params).unwrap();
    let x = module.value(DType::F32, &[1, 5], &f32_bytes(&[0.0; 5])).unwrap();
    assert_eq!(f32s(&module.call("main", &[&x]).unwrap()[0].to_bytes().unwrap()), B.to_vec());
    // Only one of the two shards: the other's key is missing.
    let e = device().load(&vmfb, &params[..1]).err().unwrap();
    assert!(matches!(e, IreeError::MissingParameter { .. }), "{e}");
    std::fs::write(&index, r#"{"format":"something else"}"#).unwrap();
    let e = Parameters::from_index(&index).unwrap_err();
    assert!(matches!(e, IreeError::ParameterFile { .. }) && e.to_string().contains("tapeout-irpa-index/1"), "{e}");
}

/// One module called from several threads at once (calls are serialized inside), devices created concurrently,
/// and a shape whose byte count overflows: right answers, typed errors, no crash.
#[test]
fn threads_and_absurd_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let (vmfb, archive) = affine(dir.path());
    let module = std::sync::Arc::new(device().load(&vmfb, &[Parameters::new("model", &archive)]).unwrap());
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let module = module.clone();
            std::thread::spawn(move || {
                for round in 0..20 {
                    let v = (t * 100 + round) as f32;
                    let x = module.value(DType::F32, &[1, 5], &f32_bytes(&[v; 5])).unwrap();
                    let y = f32s(&module.call("main", &[&x]).unwrap()[0].to_bytes().unwrap());
                    let want: Vec<f32> = (0..5).map(|i| v * W[i] + B[i]).collect();
                    assert_eq!(y, want, "thread {t} round {round}");
                }
            })
        })
        .collect();
    let instance = Instance::new().unwrap();
    let devices: Vec<_> = (0..3)
        .map(|_| {
            let instance = instance.clone();
            std::thread::spawn(move || instance.device("local-task", 1).map(|d| d.uri().to_owned()))
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    for d in devices {
        assert_eq!(d.join().unwrap().unwrap(), "local-task");
    }
    let e = module.value(DType::F32, &[u64::MAX, 2], &[]).unwrap_err();
    assert!(e.to_string().contains("more bytes or elements than 64 bits"), "{e}");
    let e = module.value(DType::U8, &[(1u64 << 63) + 1, 0], &[]).unwrap_err();
    assert!(e.to_string().contains("64 bits"), "{e}");
}

/// Waits under SCHED_BATCH (the default) or as IREE waits by itself: the same numbers either way, and the caller's
/// thread has its own policy again once a value, a call and a read have returned (SCHED_OTHER, unless the tests
/// themselves run under another: then it is left alone). Which entry points take the guard: src/lib.rs's tests.
#[test]
#[cfg(target_os = "linux")]
fn batch_waits_change_no_number_and_give_the_thread_back() {
    let dir = tempfile::tempdir().unwrap();
    let (vmfb, archive) = affine(dir.path());
    let device = Instance::new().unwrap().device("local-task", 2).unwrap();
    assert!(!device.batch_waits(), "off by default: the caller's thread is the caller's");
    let module = std::sync::Arc::new(device.load(&vmfb, &[Parameters::new("model", &archive)]).unwrap());
    for on in [true, false, true] {
        device.set_batch_waits(on);
        let module = module.clone();
        std::thread::spawn(move || {
            let start = policy();
            let x: Vec<f32> = (0..35).map(|i| i as f32 * 0.25 - 4.0).collect();
            let input = module.value(DType::F32, &[7, 5], &f32_bytes(&x)).unwrap();
            assert_eq!(policy(), start, "after making a value (batch waits {on})");
            let out = module.call("main", &[&input]).unwrap();
            assert_eq!(policy(), start, "after the call (batch waits {on})");
            let y = f32s(&out[0].to_bytes().unwrap());
            assert_eq!(policy(), start, "after the read (batch waits {on})");
            let want: Vec<f32> = x.iter().enumerate().map(|(i, xi)| xi * W[i % 5] + B[i % 5]).collect();
            assert_eq!(y, want, "batch waits {on}");
        })
        .join()
        .unwrap();
    }
}
