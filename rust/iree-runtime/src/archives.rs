//! Checks on parameter files made before IREE indexes them. IREE 3.13's parsers trust some fields they should
//! not: an IRPA entry or segment whose range wraps past 2^64 passes its bounds check and is read out of the
//! mapping (SIGSEGV); a GGUF file whose tensor data would start past its end makes the data size wrap, so any
//! tensor range passes; a GGUF tensor of the removed GGML types 4 and 5 divides by zero (SIGFPE). And the same key
//! in two files under one scope silently resolves to the first.
//!
//! Only indexes are read: the file is memory-mapped and its header and tables parsed; tensor bytes are touched
//! only to compare a key that two files both hold.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;
use tapeout_irpa::{Archive, IrpaError, Payload};

use crate::device::Parameters;
use crate::error::IreeError;

/// Where one parameter's bytes are.
#[derive(Clone, Copy)]
enum Bytes<'a> {
    /// Stored bytes.
    Data(&'a [u8]),
    /// A pattern repeated to `length` bytes.
    Splat { pattern: &'a [u8], length: u64 },
}

impl Bytes<'_> {
    fn len(&self) -> u64 {
        match self {
            Bytes::Data(d) => d.len() as u64,
            Bytes::Splat { length, .. } => *length,
        }
    }
}

/// One opened parameter file: an IRPA archive (its own validating reader), or a mapped GGUF / safetensors file
/// with its tensors' absolute byte ranges.
enum Opened {
    Irpa(Archive),
    Mapped { map: Mmap, tensors: Vec<(String, u64, u64)> },
}

impl Opened {
    /// Every key with its bytes, in file order.
    fn entries(&self) -> Vec<(&str, Bytes<'_>)> {
        match self {
            Opened::Irpa(archive) => archive
                .entries()
                .map(|e| {
                    let bytes = match e.payload {
                        Payload::Data(d) => Bytes::Data(d),
                        Payload::Splat { pattern, length } => Bytes::Splat { pattern, length },
                    };
                    (e.key, bytes)
                })
                .collect(),
            Opened::Mapped { map, tensors } => tensors
                .iter()
                .map(|(key, start, end)| {
                    // Ranges were checked against this mapping when it was parsed.
                    let range = usize::try_from(*start).ok().zip(usize::try_from(*end).ok());
                    let bytes = range.and_then(|(s, e)| map.get(s..e)).unwrap_or(&[]);
                    (key.as_str(), Bytes::Data(bytes))
                })
                .collect(),
        }
    }
}

/// The format IREE's loader picks for `path`: by extension, and IRPA for anything else (as the shim does).
fn format_of(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("gguf") => "gguf",
        Some("safetensors") => "safetensors",
        _ => "irpa",
    }
}

/// Validates every parameter file and refuses a key held with different contents by two files of one scope.
pub(crate) fn check(parameters: &[Parameters]) -> Result<(), IreeError> {
    let opened = parameters.iter().map(|p| open(&p.path)).collect::<Result<Vec<_>, _>>()?;
    let entries: Vec<_> = opened.iter().map(Opened::entries).collect();
    // (scope, key) → (file index, bytes) of its first holder.
    let mut seen: HashMap<(&str, &str), (usize, Bytes<'_>)> = HashMap::new();
    for (i, (p, list)) in parameters.iter().zip(&entries).enumerate() {
        for (key, bytes) in list {
            let Some((first, held)) = seen.get(&(p.scope.as_str(), *key)) else {
                seen.insert((p.scope.as_str(), key), (i, *bytes));
                continue;
            };
            if let Some(detail) = difference(*held, *bytes) {
                let first_path = parameters.get(*first).map(|f| f.path.clone()).unwrap_or_default();
                return Err(IreeError::ConflictingParameter {
                    scope: p.scope.clone(),
                    key: (*key).to_owned(),
                    first: first_path,
                    second: p.path.clone(),
                    detail,
                });
            }
        }
    }
    Ok(())
}

fn open(path: &Path) -> Result<Opened, IreeError> {
    let bad = |message: String| IreeError::ParameterFile { path: path.to_path_buf(), message };
    match format_of(path) {
        "irpa" => Archive::open(path).map(Opened::Irpa).map_err(|e| match e {
            IrpaError::Format { problem, .. } => bad(format!(
                "not an archive IREE can read safely: {problem}; rewrite it with `tapeout pack` or re-export the model"
            )),
            other => bad(other.to_string()),
        }),
        format => {
            let file = File::open(path).map_err(|e| bad(format!("cannot open it: {e}")))?;
            let size = file.metadata().map_err(|e| bad(format!("cannot read its size: {e}")))?.len();
            if size == 0 {
                return Err(bad(format!("the file is empty; expected a {format} file")));
            }
            // SAFETY: read-only mapping; the file must not be truncated while loading, as for IREE's own mapping.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| bad(format!("cannot map it: {e}")))?;
            let tensors = if format == "gguf" { gguf_tensors(&map) } else { safetensors_tensors(&map) };
            let tensors = tensors.map_err(|e| {
                bad(format!(
                    "not a {format} file IREE can read safely: {e}; rewrite it with the tool that made it, or check it \
                     with `tapeout convert {} -o <out>.irpa` and serve the archive",
                    path.display()
                ))
            })?;
            Ok(Opened::Mapped { map, tensors })
        }
    }
}

/// How two holders of one key differ, or `None` when their bytes are the same. Sizes first; then the bytes in
/// place (mapped pages, compared in order: nothing is copied onto the heap).
fn difference(a: Bytes<'_>, b: Bytes<'_>) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{} bytes and {} bytes", a.len(), b.len()));
    }
    let first_diff = match (a, b) {
        (Bytes::Data(x), Bytes::Data(y)) => {
            // A MiB at a time with memcmp; byte by byte only inside the first piece that differs.
            const PIECE: usize = 1 << 20;
            let piece = x.chunks(PIECE).zip(y.chunks(PIECE)).position(|(p, q)| p != q);
            piece.and_then(|n| {
                let (p, q) = (x.chunks(PIECE).nth(n)?, y.chunks(PIECE).nth(n)?);
                p.iter().zip(q).position(|(a, b)| a != b).map(|i| (n * PIECE + i) as u64)
            })
        }
        (Bytes::Splat { pattern, .. }, Bytes::Data(d)) | (Bytes::Data(d), Bytes::Splat { pattern, .. }) => {
            d.iter().zip(pattern.iter().cycle()).position(|(p, q)| p != q).map(|i| i as u64)
        }
        (Bytes::Splat { pattern: p, .. }, Bytes::Splat { pattern: q, .. }) => {
            // Equal lengths: the same bytes when one period repeats the other over their common period.
            let period = p.len().max(q.len());
            let (pp, qq) = (p.iter().cycle().take(period), q.iter().cycle().take(period));
            let differs = pp.zip(qq).position(|(x, y)| x != y).map(|i| i as u64);
            differs.filter(|&i| i < a.len())
        }
    };
    first_diff.map(|i| format!("{} bytes each, first differing at byte {i}", a.len()))
}

/// GGML types IREE 3.13's GGUF reader sizes: (block elements, block bytes), by type id. Types 4 and 5 (removed
/// from GGML) have a zero block size in its table, which it divides by.
fn ggml_block(ty: u32) -> Option<(u64, u64)> {
    Some(match ty {
        0 => (1, 4),
        1 => (1, 2),
        2 => (32, 18),
        3 => (32, 20),
        6 => (32, 22),
        7 => (32, 24),
        8 => (32, 34),
        9 => (32, 40),
        10 => (256, 84),
        11 => (256, 110),
        12 => (256, 144),
        13 => (256, 176),
        14 => (256, 210),
        15 => (256, 292),
        16 => (1, 1),
        17 => (1, 2),
        18 => (1, 4),
        _ => return None,
    })
}

/// A cursor over untrusted bytes: every read is bounded by what is there.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: u64,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], String> {
        let len = self.bytes.len() as u64;
        let end = self.at.checked_add(n).filter(|&e| e <= len);
        let slice = end.and_then(|e| self.bytes.get(usize::try_from(self.at).ok()?..usize::try_from(e).ok()?));
        let Some(slice) = slice else {
            return Err(format!("{what} at byte {} needs {n} bytes but the file ends at {len}", self.at));
        };
        self.at += n;
        Ok(slice)
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().map_err(|_| what.to_owned())?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| what.to_owned())?))
    }
    fn string(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u64(what)?;
        self.take(n, what)
    }
}

/// Skips one GGUF metadata value of type `ty` (arrays one level deep, as IREE reads them).
fn skip_value(c: &mut Cursor<'_>, ty: u32, key: &str, in_array: bool) -> Result<(), String> {
    let what = format!("metadata value '{key}'");
    match ty {
        0 | 1 | 7 => c.take(1, &what).map(drop),
        2 | 3 => c.take(2, &what).map(drop),
        4..=6 => c.take(4, &what).map(drop),
        10..=12 => c.take(8, &what).map(drop),
        8 => c.string(&what).map(drop),
        9 if !in_array => {
            let elem = c.u32(&what)?;
            let count = c.u64(&what)?;
            // Each element takes at least one byte: the count cannot outrun the bytes that are there.
            for _ in 0..count {
                skip_value(c, elem, key, true)?;
            }
            Ok(())
        }
        9 => Err(format!("{what} is an array of arrays, which IREE's GGUF reader refuses")),
        other => Err(format!("{what} has unknown type {other}")),
    }
}

/// The tensors of a GGUF file and their absolute byte ranges, each checked to lie inside the file, following
/// IREE 3.13's reader (gguf_parser.c): versions 2 and 3, `general.alignment` a u32 power of two.
fn gguf_tensors(bytes: &[u8]) -> Result<Vec<(String, u64, u64)>, String> {
    let mut c = Cursor { bytes, at: 0 };
    if c.take(4, "magic")? != b"GGUF" {
        return Err("no GGUF magic at byte 0".into());
    }
    let version = c.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version}; IREE reads versions 2 and 3"));
    }
    let tensor_count = c.u64("tensor count")?;
    let kv_count = c.u64("metadata count")?;
    let mut alignment = 32u64;
    for _ in 0..kv_count {
        let key = String::from_utf8_lossy(c.string("metadata key")?).into_owned();
        let ty = c.u32("metadata type")?;
        if key == "general.alignment" {
            if ty != 4 {
                return Err(format!("general.alignment has type {ty}; it must be a u32 (type 4)"));
            }
            alignment = u64::from(c.u32("general.alignment")?);
            if !alignment.is_power_of_two() {
                return Err(format!("general.alignment {alignment} is not a power of two"));
            }
        } else {
            skip_value(&mut c, ty, &key, false)?;
        }
    }
    let mut infos = Vec::new();
    for _ in 0..tensor_count {
        let name = String::from_utf8_lossy(c.string("tensor name")?).into_owned();
        let dims = c.u32(&format!("tensor '{name}' dimension count"))?;
        let mut elements = 1u64;
        for _ in 0..dims {
            let d = c.u64(&format!("tensor '{name}' dimension"))?;
            elements = elements.checked_mul(d).ok_or(format!("tensor '{name}' has more elements than 2^64"))?;
        }
        let ty = c.u32(&format!("tensor '{name}' type"))?;
        let offset = c.u64(&format!("tensor '{name}' offset"))?;
        let (block, block_bytes) =
            ggml_block(ty).ok_or(format!("tensor '{name}' has GGML type {ty}, which IREE 3.13 cannot size"))?;
        let size = elements.checked_mul(block_bytes).map(|b| b / block);
        let size = size.ok_or(format!("tensor '{name}' size overflows 64 bits"))?;
        infos.push((name, offset, size));
    }
    let len = bytes.len() as u64;
    let data = c.at.checked_next_multiple_of(alignment).filter(|&d| d <= len);
    let data = data.ok_or(format!("its tensor data would start past its end ({len} bytes)"))?;
    infos
        .into_iter()
        .map(|(name, offset, size)| {
            let start = data.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(size)).filter(|&e| e <= len);
            match (start, end) {
                (Some(start), Some(end)) => Ok((name, start, end)),
                _ => Err(format!(
                    "tensor '{name}' ({size} bytes at data offset {offset}) runs past the end of the {len}-byte file"
                )),
            }
        })
        .collect()
}

/// The largest safetensors JSON header read (the `safetensors` crate's own limit).
const MAX_SAFETENSORS_HEADER: u64 = 100 << 20;

/// The tensors of a safetensors file and their absolute byte ranges: the header's length in range, its JSON an
/// object, every tensor's `data_offsets` a `[begin, end]` pair inside the data.
fn safetensors_tensors(bytes: &[u8]) -> Result<Vec<(String, u64, u64)>, String> {
    let mut c = Cursor { bytes, at: 0 };
    let n = c.u64("header length")?;
    if n > MAX_SAFETENSORS_HEADER {
        return Err(format!("its header claims {n} bytes, more than the {MAX_SAFETENSORS_HEADER} read"));
    }
    let header = c.take(n, "header")?;
    let json: serde_json::Value = serde_json::from_slice(header).map_err(|e| format!("its header is not JSON: {e}"))?;
    let object = json.as_object().ok_or("its header is not a JSON object")?;
    let (base, len) = (c.at, bytes.len() as u64);
    let mut tensors = Vec::new();
    for (name, info) in object.iter().filter(|(k, _)| k.as_str() != "__metadata__") {
        let offsets = info.get("data_offsets").and_then(|o| o.as_array());
        let pair = offsets.and_then(|o| Some((o.first()?.as_u64()?, o.get(1)?.as_u64()?)));
        let Some((begin, end)) = pair.filter(|_| offsets.is_some_and(|o| o.len() == 2)) else {
            return Err(format!("tensor '{name}' has no [begin, end] data_offsets"));
        };
        let range = base.checked_add(begin).zip(base.checked_add(end)).filter(|&(s, e)| s <= e && e <= len);
        let Some((start, stop)) = range else {
            return Err(format!(
                "tensor '{name}' data_offsets [{begin}, {end}] are not a range inside the {}-byte data",
                len - base
            ));
        };
        tensors.push((name.clone(), start, stop));
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use std::path::{Path, PathBuf};

    use tapeout_irpa::{ArchiveWriter, BytesSource};

    use super::check;
    use crate::device::Parameters;
    use crate::error::IreeError;

    /// An archive of `entries` (key, bytes) at `dir/name`.
    fn irpa(dir: &Path, name: &str, entries: &[(&str, &[u8])]) -> PathBuf {
        let mut w = ArchiveWriter::new();
        for (key, bytes) in entries {
            w.add_data(*key, BytesSource(bytes)).unwrap();
        }
        let path = dir.join(name);
        w.write(&path).unwrap();
        path
    }

    fn patch_u64(path: &Path, at: usize, value: u64) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        std::fs::write(path, bytes).unwrap();
    }

    fn message(e: IreeError) -> (PathBuf, String) {
        match e {
            IreeError::ParameterFile { path, message } => (path, message),
            other => panic!("{other:?}"),
        }
    }

    /// IREE 3.13 adds offset and length unchecked and accepts both wraps below: the entry's reads the wrong bytes,
    /// the segment's reads before the file (docs/reliability.md, "Where IREE itself crashes").
    #[test]
    fn irpa_ranges_that_wrap_past_2_64_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = irpa(dir.path(), "a.irpa", &[("w", &[1u8; 16])]);
        check(&[Parameters::new("model", &path)]).unwrap();
        // The entry's storage range (entry at 96, its range at +60): offset 2^64 - 8, length 16 ends at 8.
        patch_u64(&path, 96 + 60, u64::MAX - 7);
        let (at, text) = message(check(&[Parameters::new("model", &path)]).unwrap_err());
        assert_eq!(at, path);
        assert!(text.contains("storage segment reference out of range"), "{text}");
        assert!(text.contains("tapeout pack"), "{text}");
        // The storage segment (header +72; its length is 16): offset 2^64 - 8 ends at 8.
        let path = irpa(dir.path(), "b.irpa", &[("w", &[1u8; 16])]);
        patch_u64(&path, 72, u64::MAX - 7);
        let (_, text) = message(check(&[Parameters::new("model", &path)]).unwrap_err());
        assert!(text.contains("storage segment"), "{text}");
    }

    /// Through [`Device::load`](crate::Device::load): the checks run before IREE indexes the files.
    #[test]
    fn load_refuses_a_bad_archive_and_a_conflicting_key_and_takes_the_good_ones() {
        use crate::test_support::{CPU, compile, f32_bytes};
        let mlir = r#"util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<4xf32>
func.func @main() -> tensor<4xf32> {
  %0 = util.global.load @w : tensor<4xf32>
  return %0 : tensor<4xf32>
}"#;
        let dir = tempfile::tempdir().unwrap();
        let vmfb = compile(dir.path(), "param", mlir, CPU);
        let device = crate::Instance::new().unwrap().device("local-sync", 0).unwrap();
        let w = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
        let good = irpa(dir.path(), "good.irpa", &[("w", &w)]);
        let again = irpa(dir.path(), "again.irpa", &[("w", &w)]);
        let other = irpa(dir.path(), "other.irpa", &[("w", &f32_bytes(&[1.0, 2.0, 3.0, 5.0]))]);
        let p = |path: &PathBuf| Parameters::new("model", path);
        device.load(&vmfb, &[p(&good), p(&again)]).unwrap();
        let e = device.load(&vmfb, &[p(&good), p(&other)]).unwrap_err();
        assert!(matches!(&e, IreeError::ConflictingParameter { key, .. } if key == "w"), "{e:?}");
        let bad = irpa(dir.path(), "bad.irpa", &[("w", &w)]);
        patch_u64(&bad, 96 + 60, u64::MAX - 7);
        let e = device.load(&vmfb, &[p(&bad)]).unwrap_err();
        assert!(matches!(&e, IreeError::ParameterFile { path, .. } if *path == bad), "{e:?}");
    }

    #[test]
    fn a_key_in_two_files_of_one_scope_must_hold_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let a = irpa(dir.path(), "a.irpa", &[("w", &[1, 2, 3, 4]), ("b", &[9])]);
        let same = irpa(dir.path(), "same.irpa", &[("w", &[1, 2, 3, 4])]);
        let other = irpa(dir.path(), "other.irpa", &[("w", &[1, 2, 7, 4])]);
        let longer = irpa(dir.path(), "longer.irpa", &[("w", &[1, 2, 3, 4, 5])]);
        let p = |scope: &str, path: &PathBuf| Parameters::new(scope, path);
        check(&[p("model", &a), p("model", &same)]).unwrap();
        check(&[p("model", &a), p("other", &other)]).unwrap();
        let e = check(&[p("model", &a), p("model", &other)]).unwrap_err();
        let IreeError::ConflictingParameter { scope, key, first, second, detail } = &e else { panic!("{e:?}") };
        assert_eq!((scope.as_str(), key.as_str(), first, second), ("model", "w", &a, &other));
        assert_eq!(detail, "4 bytes each, first differing at byte 2");
        let text = e.to_string();
        assert!(text.contains("'model::w' is in both") && text.contains("different scopes"), "{text}");
        let e = check(&[p("model", &a), p("model", &longer)]).unwrap_err();
        assert!(e.to_string().contains("4 bytes and 5 bytes"), "{e}");
    }

    #[test]
    fn the_first_difference_is_found_past_the_first_piece() {
        let a = vec![5u8; 3 << 20];
        let mut b = a.clone();
        b[(5 << 19) + 3] = 6;
        let detail = super::difference(super::Bytes::Data(&a), super::Bytes::Data(&b)).unwrap();
        assert_eq!(detail, format!("{} bytes each, first differing at byte {}", 3 << 20, (5 << 19) + 3));
        assert_eq!(super::difference(super::Bytes::Data(&a), super::Bytes::Data(&a)), None);
    }

    #[test]
    fn splats_compare_by_the_bytes_they_stand_for() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ArchiveWriter::new();
        w.add_splat("s", &[7, 0], 8).unwrap();
        let splat = dir.path().join("s.irpa");
        w.write(&splat).unwrap();
        let data = irpa(dir.path(), "d.irpa", &[("s", &[7, 0, 7, 0, 7, 0, 7, 0])]);
        let wrong = irpa(dir.path(), "x.irpa", &[("s", &[7, 0, 7, 0, 7, 0, 7, 1])]);
        let p = |path: &PathBuf| Parameters::new("m", path);
        check(&[p(&splat), p(&data)]).unwrap();
        let e = check(&[p(&splat), p(&wrong)]).unwrap_err();
        assert!(e.to_string().contains("first differing at byte 7"), "{e}");
    }

    /// A GGUF file: header, the u32 `general.alignment` when given, then tensors (name, dims, type, offset).
    fn gguf(alignment: Option<u32>, tensors: &[(&str, &[u64], u32, u64)], data: usize) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend(u64::from(alignment.is_some()).to_le_bytes());
        if let Some(a) = alignment {
            b.extend(17u64.to_le_bytes());
            b.extend(b"general.alignment");
            b.extend(4u32.to_le_bytes());
            b.extend(a.to_le_bytes());
        }
        for (name, dims, ty, offset) in tensors {
            b.extend((name.len() as u64).to_le_bytes());
            b.extend(name.as_bytes());
            b.extend(u32::try_from(dims.len()).unwrap().to_le_bytes());
            dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
            b.extend(ty.to_le_bytes());
            b.extend(offset.to_le_bytes());
        }
        b.resize(b.len().next_multiple_of(32) + data, 0);
        b
    }

    #[test]
    fn gguf_indexes_iree_would_misread_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let refuse = |bytes: Vec<u8>, needle: &str| {
            std::fs::write(&path, bytes).unwrap();
            let (_, text) = message(check(&[Parameters::new("m", &path)]).unwrap_err());
            assert!(text.contains(needle), "{needle:?} not in: {text}");
        };
        std::fs::write(&path, gguf(None, &[("w", &[4], 0, 0), ("q", &[32], 8, 16)], 64)).unwrap();
        check(&[Parameters::new("m", &path)]).unwrap();
        // The alignment pushes the data start past the end: IREE's data size wraps and any range passes.
        refuse(gguf(Some(1 << 30), &[("w", &[4], 0, 0)], 16), "tensor data would start past its end");
        refuse(gguf(Some(24), &[], 0), "general.alignment 24 is not a power of two");
        // GGML types 4 and 5 have a zero block size in IREE's table: SIGFPE there.
        refuse(gguf(None, &[("w", &[4], 4, 0)], 64), "GGML type 4");
        refuse(gguf(None, &[("w", &[4], 0, 56)], 64), "tensor 'w' (16 bytes at data offset 56) runs past the end");
        refuse(gguf(None, &[("w", &[1 << 40, 1 << 40], 0, 0)], 64), "more elements than 2^64");
        let mut cut = gguf(None, &[("w", &[4], 0, 0)], 0);
        cut.truncate(30);
        refuse(cut, "needs 8 bytes but the file ends at 30");
    }

    #[test]
    fn safetensors_headers_are_checked_for_ranges_inside_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let file = |json: &str, data: usize| {
            let mut b = (json.len() as u64).to_le_bytes().to_vec();
            b.extend(json.as_bytes());
            b.resize(b.len() + data, 0);
            std::fs::write(&path, b).unwrap();
            check(&[Parameters::new("m", &path)])
        };
        let ok = r#"{"__metadata__":{"a":"b"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        file(ok, 8).unwrap();
        let (_, text) = message(file(ok, 4).unwrap_err());
        assert!(text.contains("tensor 'w' data_offsets [0, 8] are not a range inside the 4-byte data"), "{text}");
        let (_, text) = message(file(r#"{"w":{"data_offsets":[8,0]}}"#, 8).unwrap_err());
        assert!(text.contains("[8, 0]"), "{text}");
        let (_, text) = message(file("{nope", 8).unwrap_err());
        assert!(text.contains("not JSON"), "{text}");
        std::fs::write(&path, u64::MAX.to_le_bytes()).unwrap();
        let (_, text) = message(check(&[Parameters::new("m", &path)]).unwrap_err());
        assert!(text.contains("header claims 18446744073709551615 bytes"), "{text}");
    }
}
