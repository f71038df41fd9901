//! Dequantization throughput (Q4_K, Q8_0 → f32), single thread.
//!
//! Reads `$TAPEOUT_DEQUANT_DATA/{Q4_K,Q8_0}.bin` when set (scripts/bench writes them and times
//! PyPI gguf's numpy `dequantize` on the same files), otherwise generates 16 Mi values per format.
#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tapeout_graph::{ConstantData, Encoding, Lent, dequantize};

fn blocks(encoding: &Encoding) -> Vec<u8> {
    if let Some(dir) = std::env::var_os("TAPEOUT_DEQUANT_DATA") {
        let path = std::path::Path::new(&dir).join(format!("{}.bin", encoding.name()));
        return std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let (elems, bytes) = encoding.block_geometry().unwrap_or((32, 34));
    let n = (16 << 20) / elems * bytes;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut data: Vec<u8> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect();
    // Finite scales: put 0.01 in every f16 field at the block start (d, and dmin for K-quants).
    let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for b in data.chunks_exact_mut(usize::try_from(bytes).unwrap_or(34)) {
        b[..2].copy_from_slice(&scale);
        if matches!(encoding, Encoding::Q4K) {
            b[2..4].copy_from_slice(&scale);
        }
    }
    data
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("dequant");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(5));
    for encoding in [Encoding::Q4K, Encoding::Q8_0] {
        let data = blocks(&encoding);
        let (elems, bytes) = encoding.block_geometry().unwrap_or((32, 34));
        let values = data.len() as u64 / bytes * elems;
        let mut out = vec![0f32; usize::try_from(values).unwrap_or(0)];
        group.throughput(Throughput::Elements(values));
        group.bench_function(format!("kernel/{}", encoding.name()), |b| {
            b.iter(|| dequantize(&encoding, black_box(&data), &mut out).unwrap_or_else(|e| panic!("{e}")));
        });
        // The export path: lazy, chunked decode streamed to a sink.
        let constant =
            ConstantData::Dequantize { encoding: encoding.clone(), bytes: Lent::Slice(&data), elements: values };
        group.bench_function(format!("stream/{}", encoding.name()), |b| {
            b.iter(|| {
                let mut sink = NullSink(0);
                constant.stream(&mut sink).unwrap_or_else(|e| panic!("{e}"));
                black_box(sink.0)
            });
        });
    }
    group.finish();
}

struct NullSink(u64);

impl tapeout_graph::ByteSink for NullSink {
    fn put(&mut self, bytes: &[u8]) -> Result<(), tapeout_graph::StreamError> {
        self.0 += u64::from(bytes.first().copied().unwrap_or(0)) + bytes.len() as u64;
        Ok(())
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
