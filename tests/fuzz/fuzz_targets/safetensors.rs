//! The safetensors reader: any bytes give tensors inside the input, or a typed error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((tensors, order, metadata)) = tapeout_graph::io::safetensors::parse(data) {
        assert_eq!(tensors.len(), order.len());
        assert!(metadata.windows(2).all(|w| w[0] <= w[1]), "metadata sorted by key");
        for t in tensors.values() {
            assert!(t.start <= t.end && t.end <= data.len() as u64);
        }
    }
});
