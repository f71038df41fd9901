//! Export in one pass: the module text, and every external constant streamed into the archive.

use crate::metadata::{PlaneOf, TensorMetadata};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tapeout_graph::io::{FileAccess, GraphFile, WeightSet};
use tapeout_graph::{
    ComputeGraph, ConstantData, ExtractOptions, HalfConstantHandling, KeyCollision, PackedCodesLayout,
    PackedConstantHandling, PassOps, Target, Trace, Tuning, WeightLayout,
};
use tapeout_hlo::{EmitOptions, HloError, MaterializationPolicy};
use tapeout_irpa::{ArchiveWriter, AtomicFile, FileRegionSource, Progress};

use crate::archive::ConstantPayload;
use crate::error::{Error, Result};
use crate::shards::{self, ArchiveFiles};
use crate::signature;

/// What [`export`] wrote.
#[derive(Debug, Clone)]
pub struct ExportSummary {
    /// The module file (`<dir>/<name>.mlir`).
    pub mlir: PathBuf,
    /// Its size in bytes.
    pub mlir_bytes: u64,
    /// The signature file beside it (`<dir>/<name>.signature.json`, `docs/signature-format.md`): every function's
    /// arguments and results in order, with their names, dtypes and shapes.
    pub signature: PathBuf,
    /// The tuning spec beside it (`<dir>/<name>.tuning.mlir`, [`tapeout_hlo::cpu_tuning_spec`]) when the module has
    /// products it tunes ([`tapeout_hlo::is_tuned`]: codes kept packed in 32-value blocks, bf16 / f16 row bands):
    /// pass it to `iree-compile` for a CPU with `--iree-codegen-tuning-spec-path`, and `--mlir-disable-threading`
    /// (IREE 3.13 can deadlock loading a spec on several threads).
    pub tuning_spec: Option<PathBuf>,
    /// The parameter archive (`<dir>/<name>.irpa`), or the shards of a set and its index.
    pub archives: ArchiveFiles,
    /// The flags that give IREE's tools the archives: `--parameters=SCOPE=FILE`, one per file.
    pub parameters_flags: Vec<String>,
    /// Number of external parameters.
    pub externals: usize,
    /// Number of constants written inline.
    pub inline_constants: usize,
    /// Keys changed to keep them unique, for the user to see.
    pub key_collisions: Vec<KeyCollision>,
}

/// Longest file stem written: file names are limited to 255 bytes, and the writer adds a temp suffix.
const MAX_STEM: usize = 96;

/// The file stem for a module name: letters, digits, `.`, `-` and `_` kept, the rest `_`; at most 96
/// bytes, a longer name cut and given a hash of the whole name, so distinct names stay distinct.
#[must_use]
pub fn file_stem(module_name: &str) -> String {
    let stem: String =
        module_name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    let stem = if stem.is_empty() || stem.starts_with('.') { format!("model{stem}") } else { stem };
    if stem.len() <= MAX_STEM {
        return stem;
    }
    // FNV-1a of the full module name: stable across runs, platforms and versions (it names files). Written out
    // rather than taken from a hashing crate, whose output carries no such promise across releases.
    let hash =
        module_name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{}-{hash:016x}", &stem[..MAX_STEM - 17])
}

/// The metadata blob stored with each archive entry: dtype, shape, and the stored form it was
/// converted from (so the archive describes itself; IREE ignores it).
#[allow(clippy::expect_used, reason = "finalize turns every dynamic-shaped tensor into an input, never a constant")]
fn metadata(graph: &ComputeGraph<'_>, data: &ConstantData<'_>, tensor: tapeout_graph::TensorId) -> Vec<u8> {
    let spec = graph.spec(tensor);
    let shape =
        spec.shape.static_dims().expect("constants have static shapes: finalize makes dynamic-shaped ones inputs");
    let mut m = TensorMetadata::new(data.dtype().name(), &shape);
    let data = match data {
        ConstantData::Words { of } => {
            m.words_of = Some(of.dtype().name());
            of
        }
        other => other,
    };
    let held = match data {
        ConstantData::Transposed { of, rows, cols, .. } => {
            m.transposed_from = Some([*rows, *cols]);
            of
        }
        other => other,
    };
    match held {
        ConstantData::Widen { from, .. } => m.from = Some(from.name()),
        ConstantData::Dequantize { encoding, .. } => m.from = Some(encoding.name()),
        ConstantData::Plane { encoding, dims, padded_rows, plane, .. } => {
            m.from = Some(encoding.name());
            m.plane = Some(PlaneOf {
                suffix: plane.suffix(),
                packed_shape: dims,
                padded_rows: (*padded_rows != dims[0]).then_some(*padded_rows),
            });
        }
        _ => {}
    }
    m.encode()
}

/// Writes `<out_dir>/<name>.mlir`, `<out_dir>/<name>.signature.json` and `<out_dir>/<name>.irpa` for `graph`; with `max_archive_bytes`, the
/// parameters go to as many archives as that limit needs (`<name>-0000k-of-0000n.irpa` plus
/// `<name>.irpa.index.json`; no parameter is split, and one larger than the limit has a file of its own), and
/// `<out_dir>/<name>.tuning.mlir` when the module has products IREE's CPU backend reads faster with it.
///
/// External constants are streamed from their sources (borrowed f32, lazily widened or
/// dequantized) through the archive writer: peak extra memory is one chunk. Every file is written
/// atomically: the module is emitted first into its temporary file (so an emission error stops the
/// export before any archive work), then the archive is written, then the signature and the module are committed.
pub fn export(
    graph: &ComputeGraph<'_>,
    opts: &EmitOptions,
    max_archive_bytes: Option<u64>,
    out_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<ExportSummary> {
    export_functions(&[(opts.function.as_str(), graph)], opts, None, max_archive_bytes, out_dir, progress)
}

/// [`export`] for a module of several public functions (`(name, graph)` each) that share their parameters: a
/// weight several functions use under one key is one `util.global` and one archive entry. One key naming
/// different values in two functions is [`Error::Functions`]. With `files` (the weight files the graphs' constants
/// were mapped from), a constant written as stored is copied by the kernel from its file, not from its mapping.
///
/// # Errors
/// As [`export`], and [`Error::Functions`].
pub fn export_functions(
    functions: &[(&str, &ComputeGraph<'_>)],
    opts: &EmitOptions,
    files: Option<&WeightSet>,
    max_archive_bytes: Option<u64>,
    out_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<ExportSummary> {
    check_shared_keys(functions)?;
    std::fs::create_dir_all(out_dir).map_err(|source| Error::Write { path: out_dir.to_path_buf(), source })?;
    let stem = file_stem(&opts.module_name);
    let mlir = out_dir.join(format!("{stem}.mlir"));

    // The module first, uncommitted: an emission error stops the export before any archive work.
    let mut module_file = AtomicFile::create(&mlir)?;
    let externals =
        tapeout_hlo::emit_functions_pipelined(functions, opts, module_file.file()).map_err(|e| match e {
            HloError::Output(source) => Error::Write { path: mlir.clone(), source },
            other => Error::Emit(other),
        })?;
    let mlir_bytes = module_file.file().metadata().map_err(|source| Error::Write { path: mlir.clone(), source })?.len();

    let mut writer = ArchiveWriter::new();
    for ext in &externals {
        // Every external parameter the emitter declares is one of its function's constants.
        let Some((_, graph)) = functions.get(ext.function) else { continue };
        let Some(constant) = graph.constant(ext.tensor) else { continue };
        let md = metadata(graph, &constant.data, ext.tensor);
        // Bytes written as stored from a mapped weight file: the kernel copies them from that file.
        let region = constant.data.as_stored_bytes().and_then(|b| Some((files?.file_region(b)?, b.len() as u64)));
        match region {
            Some(((file, path, offset), len)) => {
                let source = FileRegionSource::of_open_file(Arc::clone(file), path, offset, len);
                writer.add_data_with_metadata(ext.key.clone(), md, source)?;
            }
            None => writer.add_data_with_metadata(ext.key.clone(), md, ConstantPayload(constant.data.clone()))?,
        }
    }
    let scope = match &opts.policy {
        MaterializationPolicy::ExternalAlways { scope } | MaterializationPolicy::SizeThreshold { scope, .. } => {
            scope.as_str()
        }
        MaterializationPolicy::InlineAlways => "model",
    };
    let archives = shards::write(writer, max_archive_bytes, out_dir, &stem, scope, progress)?;
    let signature = out_dir.join(signature::signature_file_name(&stem));
    signature::write(&signature, &opts.module_name, functions)?;
    let tuning_spec = write_tuning_spec(functions, &out_dir.join(format!("{stem}.tuning.mlir")))?;
    module_file.commit()?;
    let constants: usize = functions.iter().map(|(_, g)| g.constants().len()).sum();
    Ok(ExportSummary {
        mlir,
        mlir_bytes,
        signature,
        tuning_spec,
        parameters_flags: archives.parameters_flags(scope),
        archives,
        externals: externals.len(),
        inline_constants: constants.saturating_sub(externals.len()),
        key_collisions: functions.iter().flat_map(|(_, g)| g.key_collisions().iter().cloned()).collect(),
    })
}

/// Writes the CPU tuning spec to `path` (atomically) when `functions` hold the CPU pass's forms
/// ([`tapeout_graph::Forms::Cpu`]) and a constant of theirs is stored in a form the spec tunes ([`tapeout_hlo::is_tuned`]: codes kept packed in 32-value blocks, bf16 / f16 row bands), and returns its path.
/// Otherwise removes a spec an earlier export left there, so that a compile never picks up a spec for another module.
fn write_tuning_spec(functions: &[(&str, &ComputeGraph<'_>)], path: &Path) -> Result<Option<PathBuf>> {
    // Only the CPU pass's forms are the spec's to tile: a portable module is compiled with IREE's defaults.
    let cpu = functions.iter().all(|(_, g)| g.forms() == tapeout_graph::Forms::Cpu);
    let tuned = cpu && functions.iter().flat_map(|(_, g)| g.constants()).any(|c| tapeout_hlo::is_tuned(&c.data));
    if !tuned {
        return match std::fs::remove_file(path) {
            Ok(()) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Write { path: path.to_path_buf(), source }),
        };
    }
    let spec = tapeout_hlo::cpu_tuning_spec();
    tapeout_irpa::write_atomically(path, |f| std::io::Write::write_all(f, spec.as_bytes()))?;
    Ok(Some(path.to_path_buf()))
}

/// One key in two functions must be one value: the same tensor of the same weight file (or the same borrowed
/// memory), stored the same way.
fn check_shared_keys(functions: &[(&str, &ComputeGraph<'_>)]) -> Result<()> {
    // key -> (first function, identity, whether it is codes in row bands)
    let mut first: std::collections::HashMap<&str, (&str, String, bool)> = std::collections::HashMap::new();
    for (name, graph) in functions {
        for c in graph.constants() {
            let spec = graph.spec(c.tensor);
            let identity = format!("{} {} {}", spec.shape, c.data.dtype(), c.data.identity());
            let bands = matches!(c.data, ConstantData::Plane { band: Some(_), .. });
            match first.get(c.key.as_str()) {
                Some((other, _, other_bands)) if *other_bands != bands => {
                    let (with, without) = if bands { (name, other) } else { (other, name) };
                    return Err(Error::MixedCodeLayouts {
                        key: c.key.clone(),
                        banded: (*with).to_owned(),
                        gathering: (*without).to_owned(),
                    });
                }
                Some((other, id, _)) if *id != identity => {
                    return Err(Error::Functions(format!(
                        "parameter '{}' is one value in function '{other}' and another in function '{name}'; a key \
                         shared by functions must name the same weight (the same array or checkpoint tensor)",
                        c.key
                    )));
                }
                Some(_) => {}
                None => {
                    first.insert(c.key.as_str(), (name, identity, bands));
                }
            }
        }
    }
    Ok(())
}

/// Validates `trace` and extracts its constants: [`tapeout_graph::finalize`], in the pipeline's error.
///
/// # Errors
/// [`Error::Graph`] naming the tensor or node.
pub fn finalize<'a>(trace: &Trace<'a>, opts: &ExtractOptions) -> Result<ComputeGraph<'a>> {
    Ok(tapeout_graph::finalize(trace, opts)?)
}

/// The module text of `graph`, for callers that want it in memory (the whole text is one string).
///
/// # Errors
/// [`Error::Emit`] naming the node.
pub fn module_text(graph: &ComputeGraph<'_>, opts: &EmitOptions) -> Result<String> {
    Ok(tapeout_hlo::emit(graph, opts)?.text)
}

/// How to export a graph file ([`export_graph_file`]).
#[derive(Debug, Clone)]
pub struct GraphFileExport<'p> {
    /// The weight file (GGUF or safetensors) the graph's tensors name, if any.
    pub weights: Option<&'p Path>,
    /// Packed weights: fail (default) or dequantize.
    pub packed: PackedConstantHandling,
    /// 16-bit float weights: kept as stored (default) or widened to f32.
    pub half: HalfConstantHandling,
    /// Inline or external constants.
    pub policy: MaterializationPolicy,
    /// Module name; the graph's own name when `None`.
    pub module_name: Option<String>,
    /// Which files the graph's `data.file` entries may name (default: only its own directory tree).
    pub file_access: FileAccess,
    /// Where the weights go: in the layout chosen for their use (default) or as held.
    pub layout: WeightLayout,
    /// With the layout chosen for use: the codes of Q8_0 / Q4_0 weights kept packed in block rows (default) or
    /// in row bands ([`PackedCodesLayout`]).
    pub packed_codes: PackedCodesLayout,
    /// The device the module is for ([`Target`]: which device pass adds its forms to the portable lowering).
    pub target: Target,
    /// Whether the target's forms are written (default) or the portable lowering alone ([`Tuning`]).
    pub tuning: Tuning,
    /// Whether the graph may name what only passes write ([`PassOps`]: refused by default).
    pub pass_ops: PassOps,
    /// Split the parameters over archives of at most this many bytes each (`None`: one archive).
    pub max_archive_bytes: Option<u64>,
}

/// Exports a JSON graph file (`docs/graph-format.md`) with its weights to `<out_dir>/<name>.mlir` and
/// `<out_dir>/<name>.irpa`: read, trace, finalize, emit and archive, as [`export`].
///
/// # Errors
/// The first step's error; nothing is left under either final name.
pub fn export_graph_file(
    graph_path: &Path,
    opts: &GraphFileExport<'_>,
    out_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<ExportSummary> {
    let file = GraphFile::load(graph_path)?.with_file_access(opts.file_access);
    let weights = WeightSet::open(&file, opts.weights)?;
    let names = file.function_names();
    let mut graphs = Vec::with_capacity(names.len());
    for f in 0..names.len() {
        let trace = file.to_trace_of(f, &weights, |_, _| None)?;
        let extract = ExtractOptions {
            forced_inputs: file.forced_inputs_of(f),
            packed: opts.packed,
            half: opts.half,
            layout: opts.layout,
            packed_codes: opts.packed_codes,
            target: opts.target,
            tuning: opts.tuning,
            pass_ops: opts.pass_ops,
        };
        let graph = finalize(&trace, &extract).map_err(|e| {
            if names.len() > 1 { Error::InFunction { function: names[f].to_owned(), source: Box::new(e) } } else { e }
        })?;
        graphs.push(graph);
    }
    let emit = EmitOptions {
        module_name: opts.module_name.clone().unwrap_or_else(|| file.name.clone()),
        function: "main".into(),
        policy: opts.policy.clone(),
    };
    let functions: Vec<(&str, &ComputeGraph<'_>)> = names.iter().copied().zip(graphs.iter()).collect();
    export_functions(&functions, &emit, Some(&weights), opts.max_archive_bytes, out_dir, progress)
}

#[cfg(test)]
mod tests {
    use super::file_stem;

    #[test]
    fn stems_are_safe_short_and_distinct() {
        assert_eq!(file_stem("tiny_llm"), "tiny_llm");
        assert_eq!(file_stem("odd \"module\"/names"), "odd__module__names");
        assert_eq!(file_stem(".hidden"), "model.hidden");
        let (a, b) = (file_stem(&"x".repeat(1000)), file_stem(&format!("{}y", "x".repeat(999))));
        assert_eq!(a.len(), 96);
        assert_ne!(a, b, "long names that differ only at the end stay distinct");
    }
}
