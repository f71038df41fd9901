//! `tapeout convert`: a weight file (GGUF or safetensors) to an IRPA archive, streamed.

use crate::metadata::TensorMetadata;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use tapeout_graph::io::{Stored, WeightFile};
use tapeout_graph::{ConstantData, DType, HalfLayout, Lent};
use tapeout_irpa::{ArchiveWriter, FileRegionSource, Progress, WriteSummary};

use crate::archive::ConstantPayload;
use crate::error::{Error, Result};

/// What to convert and how.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// Decode packed blocks (and widen f16/bf16, unless `keep_dtype`) to f32, one chunk at a time.
    pub dequantize: bool,
    /// With `dequantize`: keep f16/bf16 tensors as stored, decode only packed ones.
    pub keep_dtype: bool,
    /// Only tensors whose name matches one of these globs (`*`, `?`, `[…]`); all when empty.
    pub include: Vec<String>,
    /// Leave out tensors whose name matches one of these globs.
    pub exclude: Vec<String>,
    /// `(old, new)` key renames.
    pub rename: Vec<(String, String)>,
    /// Place entries exactly as IREE's builder does ([`ArchiveWriter::iree_placement`]).
    pub iree_placement: bool,
}

/// What a conversion wrote.
#[derive(Debug, Clone)]
pub struct ConvertSummary {
    /// The archive.
    pub archive: WriteSummary,
    /// Tensors left out by `include` / `exclude`.
    pub skipped: usize,
    /// Tensors decoded or widened to f32.
    pub converted: usize,
}

/// Compiles `--include`/`--exclude` globs (`glob` crate syntax: `*`, `?`, `[abc]`, `[!abc]`; `*` matches any
/// run of characters, dots and slashes included).
fn globs(patterns: &[String], flag: &str, path: &Path) -> Result<Vec<glob::Pattern>> {
    patterns
        .iter()
        .map(|p| {
            glob::Pattern::new(p).map_err(|e| Error::Convert {
                path: path.to_path_buf(),
                detail: format!("{flag} {p:?} is not a valid glob: {e}"),
            })
        })
        .collect()
}

fn metadata(dtype: &str, shape: &[u64], encoding: Option<&str>, from: Option<&str>) -> Vec<u8> {
    TensorMetadata { encoding, from, ..TensorMetadata::new(dtype, shape) }.encode()
}

/// Writes the tensors of `file` to the archive at `out`, in file order, each payload streamed from
/// the mapping (or decoded chunk by chunk), with metadata recording dtype, shape and encoding.
pub fn convert(
    file: &WeightFile,
    opts: &ConvertOptions,
    out: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<ConvertSummary> {
    let usage = |detail: String| Error::Convert { path: file.path().to_path_buf(), detail };
    let renames: HashMap<&str, &str> = opts.rename.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let tensors = file.tensors();
    let names: HashSet<&str> = tensors.iter().map(|t| t.name).collect();
    if let Some((old, _)) = opts.rename.iter().find(|(old, _)| !names.contains(old.as_str())) {
        return Err(usage(format!("--rename names {old:?}, which is not a tensor of the file")));
    }
    let include = globs(&opts.include, "--include", file.path())?;
    let exclude = globs(&opts.exclude, "--exclude", file.path())?;
    let mut writer = ArchiveWriter::new().iree_placement(opts.iree_placement);
    let (mut skipped, mut converted) = (0, 0);
    for t in &tensors {
        let included = include.is_empty() || include.iter().any(|g| g.matches(t.name));
        if !included || exclude.iter().any(|g| g.matches(t.name)) {
            skipped += 1;
            continue;
        }
        let key = renames.get(t.name).copied().unwrap_or(t.name).to_owned(); // not renamed: its own name
        let count = t.shape.iter().product::<u64>();
        let bytes = Lent::Slice(t.bytes);
        let decode = match &t.stored {
            Stored::Packed(e) if opts.dequantize => {
                Some((ConstantData::Dequantize { encoding: e.clone(), bytes, elements: count }, e.name().to_owned()))
            }
            Stored::Dense(d @ (DType::F16 | DType::BF16)) if opts.dequantize && !opts.keep_dtype => Some((
                ConstantData::Widen { from: *d, bytes, layout: HalfLayout::RowMajor, dims: [count, 1] },
                d.name().to_owned(),
            )),
            _ => None,
        };
        match decode {
            Some((data, from)) => {
                converted += 1;
                let md = metadata("f32", &t.shape, None, Some(&from));
                writer.add_data_with_metadata(key, md, ConstantPayload(data))?;
            }
            None => {
                let md = match &t.stored {
                    Stored::Packed(e) => metadata("f32", &t.shape, Some(e.name()), None),
                    Stored::Dense(d) => metadata(d.name(), &t.shape, None, None),
                };
                // Bytes as stored: the kernel copies them from the file into the archive.
                let region = FileRegionSource::of_open_file(
                    Arc::clone(file.file()),
                    file.path(),
                    t.offset,
                    t.bytes.len() as u64,
                );
                writer.add_data_with_metadata(key, md, region)?;
            }
        }
    }
    let archive = writer.write_with_progress(out, progress)?;
    Ok(ConvertSummary { archive, skipped, converted })
}

#[cfg(test)]
mod tests {
    use super::globs;
    use std::path::Path;

    fn glob_match(pattern: &str, text: &str) -> bool {
        globs(&[pattern.to_owned()], "--include", Path::new("x")).unwrap()[0].matches(text)
    }

    #[test]
    fn globs_match_as_documented() {
        assert!(glob_match("blk.*.attn_q.weight", "blk.12.attn_q.weight"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*.weight", "x.y.weight"));
        assert!(!glob_match("*.weight", "x.bias"));
        assert!(glob_match("*a*b", "xxaxxb"));
        assert!(glob_match("blk.[01].*", "blk.1.w") && !glob_match("blk.[01].*", "blk.2.w"));
        assert!(glob_match("a/*", "a/b/c"), "* crosses slashes: tensor names are not paths");
    }

    #[test]
    fn a_bad_glob_is_an_error_naming_the_flag() {
        let e = globs(&["blk.[".to_owned()], "--exclude", Path::new("m.gguf")).unwrap_err().to_string();
        assert!(e.contains("--exclude \"blk.[\" is not a valid glob"), "{e}");
    }
}
