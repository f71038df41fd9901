//! Times one function of a compiled module served in process, its parameters memory-mapped, and reports the
//! process's memory: what `scripts/bench` (tests/bench/llama_decode.py) measures beside `iree-benchmark-module`,
//! which cannot map an archive (`--parameter_mode` is `file` or `preload`: both copy the weights into anonymous
//! memory).
//!
//! ```text
//! serve_bench MODULE.vmfb ARCHIVE.irpa FUNCTION DYNAMIC [--scope model] [--workers 2] [--warmup 3] [--repeats 20]
//!     [--batch-waits on|off]
//! ```
//!
//! Every argument of FUNCTION is zero-filled with each `?` dimension set to DYNAMIC (a prompt length for
//! `prefill`, a past length for `decode`). Prints one JSON object: the median and minimum wall time of a call
//! (results read back to the host, as a caller does), and VmHWM / RssFile / RssAnon in KiB before the module is
//! loaded, after it is loaded, and after the calls. `--batch-waits off` waits as IREE does by itself (the baseline
//! of `Device::set_batch_waits`; the benchmark turns it on, the library leaves it off by default).
#![allow(clippy::print_stdout, reason = "a command-line benchmark: its JSON goes to stdout")]

use std::time::Instant;

use tapeout_iree::{Instance, IreeError, Parameters};

/// `VmHWM`, `RssFile`, `RssAnon` of this process in KiB (zeros where /proc is absent).
fn memory() -> [u64; 3] {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    [field("VmHWM:"), field("RssFile:"), field("RssAnon:")]
}

fn json(m: [u64; 3]) -> String {
    format!("{{\"vm_hwm_kib\": {}, \"rss_file_kib\": {}, \"rss_anon_kib\": {}}}", m[0], m[1], m[2])
}

fn run(args: &[String]) -> Result<String, String> {
    let usage = "usage: serve_bench MODULE.vmfb ARCHIVE.irpa FUNCTION DYNAMIC [--scope S] [--workers N] [--warmup N] \
                 [--repeats N] [--batch-waits on|off]";
    let [vmfb, irpa, function, dynamic, rest @ ..] = args else { return Err(usage.into()) };
    let dynamic: u64 = dynamic.parse().map_err(|_| format!("DYNAMIC must be a size, not '{dynamic}'\n{usage}"))?;
    let (mut scope, mut workers, mut warmup, mut repeats) = ("model".to_owned(), 2u32, 3u32, 20u32);
    let mut batch_waits = true;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value\n{usage}"))?;
        let number = || value.parse::<u32>().map_err(|_| format!("{flag} takes a number, not '{value}'"));
        match flag.as_str() {
            "--scope" => scope.clone_from(value),
            "--workers" => workers = number()?,
            "--warmup" => warmup = number()?,
            "--repeats" => repeats = number()?.max(1),
            "--batch-waits" => {
                batch_waits = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--batch-waits takes on or off, not '{other}'")),
                }
            }
            other => return Err(format!("unknown option {other}\n{usage}")),
        }
    }
    let before = memory();
    let bytes = std::fs::read(vmfb).map_err(|e| format!("{vmfb}: {e}"))?;
    let instance = Instance::new().map_err(|e| e.to_string())?;
    let device = instance.device("local-task", workers).map_err(|e| e.to_string())?;
    device.set_batch_waits(batch_waits);
    let module = device.load(&bytes, &[Parameters::new(scope, irpa)]).map_err(|e| e.to_string())?;
    drop(bytes);
    let loaded = memory();
    let signature = module.function(function).map_err(|e| e.to_string())?.clone();
    let mut inputs = Vec::with_capacity(signature.inputs.len());
    for p in &signature.inputs {
        let dtype =
            p.dtype.ok_or_else(|| format!("argument '{}' ({}) is not a tensor tapeout serves", p.name, p.type_text))?;
        let dims: Vec<u64> = p.dims.iter().map(|d| d.unwrap_or(dynamic)).collect();
        let count = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or("argument size overflows")?;
        let len = count.checked_mul(dtype.size()).and_then(|n| usize::try_from(n).ok()).ok_or("argument too large")?;
        inputs.push(module.value(dtype, &dims, &vec![0u8; len]).map_err(|e: IreeError| e.to_string())?);
    }
    let refs: Vec<_> = inputs.iter().collect();
    let call = || -> Result<f64, String> {
        let t = Instant::now();
        let outputs = module.call(function, &refs).map_err(|e| e.to_string())?;
        for o in &outputs {
            std::hint::black_box(o.to_bytes().map_err(|e| e.to_string())?);
        }
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    for _ in 0..warmup {
        call()?;
    }
    let mut times = (0..repeats).map(|_| call()).collect::<Result<Vec<f64>, String>>()?;
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let after = memory();
    Ok(format!(
        "{{\"function\": \"{function}\", \"dynamic\": {dynamic}, \"workers\": {workers}, \"batch_waits\": {batch_waits}, \
         \"repeats\": {repeats}, \
         \"median_ms\": {median:.4}, \"min_ms\": {:.4}, \"before_load\": {}, \"loaded\": {}, \"after_calls\": {}}}",
        times[0],
        json(before),
        json(loaded),
        json(after)
    ))
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(line) => {
            println!("{line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("serve_bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
