//! The safetensors reader: any bytes give tensors inside the input, or a typed error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = tapeout_graph::io::safetensors::parse(data) {
        assert_eq!(parsed.tensors.len(), parsed.order.len());
        assert!(parsed.metadata.windows(2).all(|w| w[0] <= w[1]), "metadata sorted by key");
        for t in parsed.tensors.values() {
            assert!(t.start <= t.end && t.end <= data.len() as u64);
        }
    }
});
