//! IRPA write throughput against a plain `write()` of the same bytes to the same directory.
//!
//! Both sides write the payload in 64 MiB chunks and fsync; the archive side also writes its
//! header page, goes through a temporary file, renames it into place and syncs the directory.
//!
//! This is a scripted measurement rather than a criterion benchmark on purpose: criterion takes
//! all samples of one function before the next, and on a shared virtual disk the writeback state
//! drifts between those blocks (an artefact of up to 25 % was seen). Here the two variants
//! alternate within every round, and the medians are compared.
//!
//! `cargo bench -p tapeout-irpa --bench write` prints a table and writes
//! `target/bench/irpa_write.json` (workspace target). `TAPEOUT_BENCH_BYTES` sets the payload size (default 1 GiB),
//! `TAPEOUT_BENCH_ROUNDS` the rounds (default 7), `TAPEOUT_BENCH_DIR` the directory.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tapeout_irpa::{ArchiveWriter, BytesSource, MAX_CHUNK_BYTES};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn write_plain(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    for chunk in data.chunks(MAX_CHUNK_BYTES) {
        f.write_all(chunk)?;
    }
    f.sync_all()
}

fn write_archive(path: &Path, data: &[u8]) -> Result<(), tapeout_irpa::IrpaError> {
    let mut w = ArchiveWriter::new();
    w.add_data("weight", BytesSource(data))?;
    w.write(path).map(|_| ())
}

fn timed(path: &Path, f: impl FnOnce()) -> Duration {
    let _ = std::fs::remove_file(path);
    let t = Instant::now();
    f();
    let elapsed = t.elapsed();
    let _ = std::fs::remove_file(path);
    elapsed
}

/// `target/` of the workspace (cargo runs benches from the package directory).
fn workspace_target() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes this
    }
    let bytes = env_u64("TAPEOUT_BENCH_BYTES", 1 << 30);
    let rounds = env_u64("TAPEOUT_BENCH_ROUNDS", 7).max(1);
    let dir = std::env::var_os("TAPEOUT_BENCH_DIR").map_or_else(|| workspace_target().join("bench-tmp"), PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let len = usize::try_from(bytes).unwrap_or(usize::MAX);
    let data: Vec<u8> = (0..len).map(|i| u8::try_from(i % 251).unwrap_or(0)).collect();
    let (plain_path, archive_path) = (dir.join("plain.bin"), dir.join("bench.irpa"));

    // One unmeasured round of each warms the page cache and the allocator.
    timed(&plain_path, || write_plain(&plain_path, &data).unwrap_or_else(|e| panic!("plain write: {e}")));
    timed(&archive_path, || write_archive(&archive_path, &data).unwrap_or_else(|e| panic!("archive: {e}")));
    let (mut plain, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(timed(&plain_path, || write_plain(&plain_path, &data).unwrap_or_else(|e| panic!("{e}"))));
        ours.push(timed(&archive_path, || write_archive(&archive_path, &data).unwrap_or_else(|e| panic!("{e}"))));
    }
    let ms = |v: &[Duration]| v.iter().map(|d| d.as_millis().to_string()).collect::<Vec<_>>().join(" ");
    let (p, o) = (median(plain.clone()), median(ours.clone()));
    let ratio = p.as_secs_f64() / o.as_secs_f64();
    #[allow(clippy::cast_precision_loss)] // display only
    let gbps = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
    println!(
        "irpa_write {} MiB, {rounds} alternating rounds (ms): plain [{}]  irpa [{}]",
        bytes >> 20,
        ms(&plain),
        ms(&ours)
    );
    println!(
        "median plain {} ms ({:.2} GB/s), irpa {} ms ({:.2} GB/s): ratio {ratio:.2}x",
        p.as_millis(),
        gbps(p),
        o.as_millis(),
        gbps(o)
    );
    let json = format!(
        "{{\"bytes\": {bytes}, \"rounds\": {rounds}, \"plain_ms\": {}, \"irpa_ms\": {}, \"ratio\": {ratio:.4}}}\n",
        p.as_millis(),
        o.as_millis()
    );
    let out = workspace_target().join("bench");
    let _ = std::fs::create_dir_all(&out).and_then(|()| std::fs::write(out.join("irpa_write.json"), json));
}
