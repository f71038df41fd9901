//! IRPA write throughput against a plain `write()` of the same bytes to the same directory.
//!
//! Both sides write the payload in 64 MiB chunks and fsync; the archive side also writes its
//! header page, goes through a temporary file and renames it into place. Run with
//! `cargo bench -p tapeout-irpa --bench write`; `scripts/bench` prints the ratio.
//! `TAPEOUT_BENCH_BYTES` sets the payload size (default 1 GiB); `TAPEOUT_BENCH_DIR` the directory.

#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tapeout_irpa::{ArchiveWriter, BytesSource, MAX_CHUNK_BYTES};

fn payload_bytes() -> u64 {
    std::env::var("TAPEOUT_BENCH_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 30)
}

fn bench_dir() -> PathBuf {
    std::env::var_os("TAPEOUT_BENCH_DIR").map_or_else(|| PathBuf::from("target/bench-tmp"), PathBuf::from)
}

fn write_plain(path: &PathBuf, data: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    for chunk in data.chunks(MAX_CHUNK_BYTES) {
        f.write_all(chunk)?;
    }
    f.sync_all()
}

fn bench(c: &mut Criterion) {
    let bytes = payload_bytes();
    let len = usize::try_from(bytes).unwrap_or(usize::MAX);
    let data: Vec<u8> = (0..len).map(|i| u8::try_from(i % 251).unwrap_or(0)).collect();
    let dir = bench_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let name = format!("{}MiB", bytes >> 20);

    let mut group = c.benchmark_group("irpa_write");
    group.throughput(Throughput::Bytes(bytes));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(20));

    let plain = dir.join("plain.bin");
    group.bench_function(format!("plain_write/{name}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let _ = std::fs::remove_file(&plain);
                let t = Instant::now();
                write_plain(&plain, &data).unwrap_or_else(|e| panic!("plain write: {e}"));
                total += t.elapsed();
            }
            total
        });
    });
    let _ = std::fs::remove_file(&plain);

    let archive = dir.join("bench.irpa");
    group.bench_function(format!("irpa_writer/{name}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let _ = std::fs::remove_file(&archive);
                let t = Instant::now();
                let mut w = ArchiveWriter::new();
                w.add_data("weight", BytesSource(&data)).unwrap_or_else(|e| panic!("{e}"));
                w.write(&archive).unwrap_or_else(|e| panic!("archive write: {e}"));
                total += t.elapsed();
            }
            total
        });
    });
    let _ = std::fs::remove_file(&archive);
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
