//! Writes large test archives without holding their payloads in memory.
//!
//! * `irpa_fixture index-f32 OUT.irpa KEY COUNT` — one DATA entry of COUNT f32 values where
//!   value = index (rounded to f32), produced in 4 MiB chunks.
//! * `irpa_fixture sparse OUT.irpa ZERO_BYTES` — a DATA entry `zeros` of ZERO_BYTES zero bytes
//!   (a hole in the file), a 1 GiB splat `splat`, then DATA `tail` = f32 [1, 2, 3, 4], which
//!   therefore sits at an absolute offset above ZERO_BYTES.
//!
//! Used by the IREE end-to-end tests in `tests/iree/`.

use tapeout_irpa::{ArchiveWriter, F32Source, FnSource, IrpaError, ZerosSource};

fn usage() -> ! {
    eprintln!("usage: irpa_fixture index-f32 OUT KEY COUNT | sparse OUT ZERO_BYTES");
    std::process::exit(2)
}

fn main() -> Result<(), IrpaError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |s: &str| s.parse::<u64>().unwrap_or_else(|_| usage());
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["index-f32", out, key, count] => {
            let count = num(count);
            let mut w = ArchiveWriter::new();
            w.add_data(
                *key,
                FnSource::new(count * 4, move |sink| {
                    const CHUNK: u64 = 1 << 20;
                    let mut buf = vec![0f32; 1 << 20];
                    let mut start = 0u64;
                    while start < count {
                        let n = CHUNK.min(count - start);
                        let n_usize = usize::try_from(n).unwrap_or(0);
                        #[allow(clippy::cast_precision_loss)] // value = index rounded to f32, by definition
                        for (i, v) in buf[..n_usize].iter_mut().enumerate() {
                            *v = (start + i as u64) as f32;
                        }
                        sink.write_f32(&buf[..n_usize])?;
                        start += n;
                    }
                    Ok(())
                }),
            )?;
            let s = w.write(out)?;
            println!("{} {}", s.file_size, s.data_bytes);
        }
        ["sparse", out, zero_bytes] => {
            let mut w = ArchiveWriter::new();
            w.add_data("zeros", ZerosSource(num(zero_bytes)))?;
            w.add_splat("splat", &0.25f32.to_le_bytes(), 1 << 30)?;
            w.add_data("tail", F32Source(&[1.0, 2.0, 3.0, 4.0]))?;
            let s = w.write(out)?;
            println!("{} {}", s.file_size, s.data_bytes);
        }
        _ => usage(),
    }
    Ok(())
}
