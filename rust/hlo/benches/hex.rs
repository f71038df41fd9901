//! Hex emission of inline constants: a module whose one 64 MiB f32 constant is inline, emitted
//! straight to a file (`emit_to`), against a plain `write()` of the same hex text to the same
//! directory. Goal: at least 1 GB/s of constant bytes.
#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tapeout_graph::{Attrs, DType, ExtractOptions, OpKind, Shape, Tensor, TensorSpec, Trace, finalize};
use tapeout_hlo::{EmitOptions, MaterializationPolicy, emit_pipelined, emit_to, text::push_hex};

fn bench(c: &mut Criterion) {
    let n = 16usize << 20; // 16 Mi f32 = 64 MiB
    let values: Vec<f32> =
        (0..n).map(|i| f32::from_bits(0x3f80_0000 ^ u32::try_from(i % 65_521).unwrap_or(0))).collect();
    let mut t = Trace::new();
    let w = t.add_tensor(Tensor::f32(TensorSpec::new("w", Shape::of(&[n as u64]), DType::F32), &values));
    let y = t.add_placeholder(TensorSpec::new("y", Shape::of(&[n as u64]), DType::F32));
    t.record(OpKind::Neg, Attrs::new(), &[w], &[y]);
    t.set_outputs(&[y]);
    let graph = finalize(&t, &ExtractOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let opts = EmitOptions { policy: MaterializationPolicy::InlineAlways, ..EmitOptions::default() };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-tmp");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let (module_path, plain_path) = (dir.join("hex_module.mlir"), dir.join("hex_plain.txt"));
    let mut hex = String::with_capacity(n * 8);
    push_hex(&mut hex, bytemuck::cast_slice(&values));

    let mut group = c.benchmark_group("hex");
    group.throughput(Throughput::Bytes((n * 4) as u64));
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(5));
    // Every variant writes a new file; the previous iteration's file is removed before the clock starts
    // (truncating it inside the timed region waits for its writeback, which is the disk, not the emitter).
    let mut to_new_file = |name: &str, path: &Path, write: &mut dyn FnMut(File)| {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let _ = std::fs::remove_file(path);
                },
                |()| write(File::create(path).unwrap_or_else(|e| panic!("{e}"))),
                BatchSize::PerIteration,
            );
        });
    };
    to_new_file("plain_write_of_hex_text/64MiB", &plain_path, &mut |mut f| {
        for chunk in hex.as_bytes().chunks(1 << 20) {
            f.write_all(chunk).unwrap_or_else(|e| panic!("{e}"));
        }
    });
    // What export does: conversion on this thread, writes on a second one.
    to_new_file("emit_to_file/64MiB", &module_path, &mut |f| {
        black_box(emit_pipelined(&graph, &opts, f).unwrap_or_else(|e| panic!("{e}")));
    });
    // The same, converting and writing one after the other on one thread (for comparison).
    to_new_file("serial_emit_to_file/64MiB", &module_path, &mut |f| {
        let mut out = BufWriter::with_capacity(1 << 20, f);
        black_box(emit_to(&graph, &opts, &mut out).unwrap_or_else(|e| panic!("{e}")));
        out.flush().unwrap_or_else(|e| panic!("{e}"));
    });
    // The conversion alone, into a buffer whose pages are already mapped (what a fresh buffer costs instead,
    // and so why export streams the module to its file: docs/performance.md#writing-archives).
    let bytes: &[u8] = bytemuck::cast_slice(&values);
    let mut warm = String::with_capacity(bytes.len() * 2);
    group.bench_function("push_hex_warm_buffer/64MiB", |b| {
        b.iter(|| {
            warm.clear();
            push_hex(&mut warm, black_box(bytes));
            black_box(warm.len())
        });
    });
    group.finish();
    let _ = std::fs::remove_file(module_path);
    let _ = std::fs::remove_file(plain_path);
}

criterion_group!(benches, bench);
criterion_main!(benches);
