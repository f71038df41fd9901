//! `ggml_dequant FORMAT IN.bin OUT.f32`: decodes whole blocks of FORMAT (Q8_0, Q4_0, Q5_0, Q5_1,
//! Q4_K, Q5_K, Q6_K) to little-endian f32, streamed through tapeout's extraction path (a packed
//! constant with DEQUANTIZE), exactly as an export would. Used by `tests/ggml`.

use std::io::Write;

use tapeout_graph::{
    Attrs, BlockOrder, DType, Encoding, ExtractOptions, Lent, OpKind, PackedConstantHandling, Shape, Storage, Tensor,
    TensorSpec, Trace, finalize,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [format, input, output] = args.as_slice() else {
        eprintln!("usage: ggml_dequant FORMAT IN.bin OUT.f32");
        std::process::exit(2);
    };
    let encoding = Encoding::parse(format);
    let (block_elems, block_bytes) =
        encoding.block_geometry().ok_or_else(|| format!("unknown or undecodable format {format}"))?;
    let bytes = std::fs::read(input)?;
    let blocks = bytes.len() as u64 / block_bytes;
    let mut trace = Trace::new();
    let w = trace.add_tensor(Tensor {
        spec: TensorSpec::new("w", Shape::of(&[blocks, block_elems]), DType::F32),
        storage: Storage::Packed { encoding, order: BlockOrder::RowMajor, bytes: Lent::Slice(&bytes) },
    });
    let y = trace.add_placeholder(TensorSpec::new("y", Shape::of(&[blocks, block_elems]), DType::F32));
    trace.record(OpKind::Neg, Attrs::new(), &[w], &[y]);
    trace.set_outputs(&[y]);
    let opts = ExtractOptions { packed: PackedConstantHandling::Dequantize, ..ExtractOptions::default() };
    let graph = finalize(&trace, &opts)?;
    let constant = graph.constant(w).ok_or("the packed weight did not become a constant")?;
    let mut out = Vec::with_capacity(usize::try_from(constant.data.byte_len())?);
    constant.data.stream(&mut out)?;
    std::io::BufWriter::new(std::fs::File::create(output)?).write_all(&out)?;
    Ok(())
}
