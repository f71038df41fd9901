//! The IRPA reader's trust boundary: any bytes give an index or a typed error, and every range of an
//! accepted index lies inside the input.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tapeout_irpa::{IndexKind, parse_index};

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = parse_index(data) {
        let len = data.len() as u64;
        for e in &index.entries {
            assert!(e.key.offset + e.key.length <= len);
            assert!(e.metadata.offset + e.metadata.length <= len);
            if let IndexKind::Data(r) = e.kind {
                assert!(r.offset + r.length <= len);
            }
        }
    }
});
