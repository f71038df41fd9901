//! The GGUF reader: any bytes give tensors inside the input, or a typed error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = tapeout_graph::io::gguf::parse(data) {
        for t in &parsed.tensors {
            assert!(t.start <= t.end && t.end <= data.len() as u64);
        }
    }
});
