//! `tapeout`: pack, inspect, verify and extract IREE parameter archives (.irpa).
//!
//! Exit codes: 0 success, 1 bad input or I/O failure, 2 usage error.
// The doc comments below are clap's help text, read as plain text: `<name>` there is a placeholder, not HTML.
#![allow(rustdoc::invalid_html_tags)]

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use tapeout::ArchiveSet;
use tapeout::graph::io::FileAccess;
use tapeout::graph::{
    Forms, HalfConstantHandling, PackedCodesLayout, PackedConstantHandling, PassOps, Target, Tuning, WeightLayout,
};
use tapeout::hlo::MaterializationPolicy;
use tapeout::irpa::{self, ArchiveWriter, FileRegionSource, IrpaError, Payload, Progress};
use tapeout::{GraphFileExport, Remedy};

mod splat;

#[derive(Parser)]
#[command(name = "tapeout", version, about = "Export and inspect IREE parameter archives (.irpa)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pack files into an .irpa archive; entries keep the order of the arguments.
    Pack {
        /// Output archive (written atomically).
        #[arg(short, long)]
        output: PathBuf,
        /// DATA entries: KEY=FILE (the file's bytes, streamed).
        #[arg(value_name = "KEY=FILE")]
        data: Vec<String>,
        /// SPLAT entries: KEY=DTYPE:VALUE:COUNT, e.g. `bias=f32:0.5:128` (COUNT elements).
        #[arg(long, value_name = "KEY=DTYPE:VALUE:COUNT")]
        splat: Vec<String>,
        /// Metadata blob for an entry: KEY=FILE.
        #[arg(long, value_name = "KEY=FILE")]
        meta: Vec<String>,
        /// Place every entry exactly as IREE's builder does (the archive is then byte-identical to IREE's
        /// `ParameterIndex.create_archive_file` for the same entries). By default a file of 8 MiB or more starts
        /// at a 64 KiB boundary, where the kernel copies it fastest.
        #[arg(long)]
        iree_placement: bool,
    },
    /// List the entries of an archive (absolute start, end, length, type, key, and each entry's metadata: dtype, shape, what it was converted from).
    Dump {
        /// The archive; or several archives of one set, or the set's `<name>.irpa.index.json`.
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// One JSON object per entry instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Export a JSON graph (docs/graph-format.md) to OUTDIR/<name>.mlir + OUTDIR/<name>.signature.json + OUTDIR/<name>.irpa.
    Export {
        /// The graph file.
        graph: PathBuf,
        /// The safetensors file its weights name.
        #[arg(long, value_name = "FILE.safetensors")]
        weights: Option<PathBuf>,
        /// Output directory.
        #[arg(short, long, value_name = "OUTDIR")]
        output: PathBuf,
        /// Parameter scope of the external constants.
        #[arg(long, default_value = "model")]
        scope: String,
        /// Constants smaller than this many bytes are written inline; the rest are external.
        #[arg(long, value_name = "BYTES", default_value_t = 4096, conflicts_with = "inline_all")]
        inline_below: u64,
        /// Write every constant inline (no archive entries).
        #[arg(long)]
        inline_all: bool,
        /// Packed (quantized) weights: refuse them, dequantize to f32 while exporting, or keep them packed (planes of
        /// integer codes and scales, contracted per block in the program).
        #[arg(long, value_enum, default_value = "fail")]
        packed: PackedArg,
        /// f16/bf16 weights: keep them as stored (the program converts them to f32 where used), or widen them
        /// to f32 parameters (twice the bytes).
        #[arg(long, value_enum, default_value = "keep")]
        half: HalfArg,
        /// Module name (default: the graph's own name).
        #[arg(long)]
        name: Option<String>,
        /// Split the parameters over archives of at most BYTES each: OUTDIR/<name>-00001-of-0000K.irpa and an
        /// index OUTDIR/<name>.irpa.index.json. No parameter is split; one larger than BYTES gets a file alone.
        #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
        max_archive_bytes: Option<u64>,
        /// Weight layout: as the program uses them (a weight used only transposed is written transposed; the
        /// default), or exactly as held.
        #[arg(long, value_enum, default_value = "for-use")]
        layout: LayoutArg,
        /// With --packed keep and the layout for use: the codes of Q8_0 / Q4_0 weights in block rows (the default)
        /// or in row bands of 32 rows (a weight no use gathers rows of, its rows a multiple of 32; Q4_0's are
        /// padded to 64): the same numbers; which decodes faster depends on the CPU. A form of the llvm-cpu target
        /// only.
        #[arg(long, value_enum, default_value = "block-rows")]
        packed_codes: PackedCodesArg,
        /// The IREE backend the module is for: llvm-cpu (the default) writes the portable lowering plus the CPU's
        /// forms and a tuning spec; vulkan, cuda, rocm and portable write the portable lowering, which every
        /// backend compiles.
        #[arg(long, value_enum, default_value = "llvm-cpu")]
        target: TargetArg,
        /// Write the portable lowering alone, without the target's forms (and so without a tuning spec): the
        /// reference the tuned forms are checked against.
        #[arg(long)]
        no_tuning: bool,
        /// Accept the ops and attributes only tapeout's passes write (row gates, barriers, banded matmuls): for
        /// tapeout's own tests of the emitter, never for a model.
        #[arg(long, hide = true)]
        accept_pass_ops: bool,
        /// Let the graph's data entries read files outside its own directory tree (absolute paths, `..`,
        /// symlinks out). Only for graphs you trust: their bytes end up in the archive or module.
        #[arg(long)]
        allow_files_outside_graph_dir: bool,
    },
    /// Convert a GGUF or safetensors file to an .irpa archive (bytes kept as stored by default).
    Convert {
        /// The input (.gguf or .safetensors).
        input: PathBuf,
        /// Output archive (written atomically).
        #[arg(short, long)]
        output: PathBuf,
        /// Decode packed blocks, and widen f16/bf16, to f32 (streamed per chunk).
        #[arg(long)]
        dequantize: bool,
        /// With --dequantize: keep f16/bf16 as stored; decode only packed tensors.
        #[arg(long, requires = "dequantize")]
        keep_dtype: bool,
        /// Only tensors matching this glob (`*`, `?`); repeatable.
        #[arg(long, value_name = "GLOB")]
        include: Vec<String>,
        /// Leave out tensors matching this glob; repeatable.
        #[arg(long, value_name = "GLOB")]
        exclude: Vec<String>,
        /// Store tensor OLD under key NEW; repeatable.
        #[arg(long, value_name = "OLD=NEW")]
        rename: Vec<String>,
        /// Place every entry at the offset IREE's builder gives it (the next 64-byte boundary). By default a
        /// tensor of 8 MiB or more starts at its offset in the input modulo 64 KiB, where the kernel copies it
        /// fastest.
        #[arg(long)]
        iree_placement: bool,
    },
    /// Check that an archive (or a set of them) is valid; exit 0 if it is, 1 with the reason if not.
    Verify {
        /// The archive; or several archives of one set, or the set's `<name>.irpa.index.json` (every file it
        /// lists must be there and hold exactly the keys it maps to it; no key may be in two files).
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
    },
    /// Write the raw bytes of one parameter to a file.
    Extract {
        /// The archive, or the index of a set.
        file: PathBuf,
        /// The key of the parameter.
        key: String,
        /// Output file (written atomically).
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// `--half` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum HalfArg {
    /// Store the 16-bit bytes; the module converts them (default).
    Keep,
    /// Store f32, widened chunk by chunk.
    Widen,
}

/// `--layout` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum LayoutArg {
    /// A weight the program only contracts on its last dimension is written transposed (default).
    ForUse,
    /// Every weight as held; the program transposes where it needs to.
    AsHeld,
}

/// `--packed-codes` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PackedCodesArg {
    /// `[Kb, 32, N]` (default).
    BlockRows,
    /// `[N / 32, Kb, 32, 32]`.
    RowBands,
}

/// `--target` values: [`Target`]'s names.
#[derive(Clone, Copy, clap::ValueEnum)]
enum TargetArg {
    /// IREE's CPU backend: the portable lowering, the CPU pass's forms and a tuning spec (default).
    LlvmCpu,
    /// IREE's Vulkan backend (vulkan-spirv): the portable lowering, narrow constants as 32-bit words.
    Vulkan,
    /// IREE's CUDA backend: the portable lowering, sub-byte planes as 32-bit words.
    Cuda,
    /// IREE's ROCm backend: the portable lowering, sub-byte planes as 32-bit words.
    Rocm,
    /// Any backend: the portable lowering.
    Portable,
}

impl From<TargetArg> for Target {
    fn from(t: TargetArg) -> Self {
        match t {
            TargetArg::LlvmCpu => Target::LlvmCpu,
            TargetArg::Vulkan => Target::Vulkan,
            TargetArg::Cuda => Target::Cuda,
            TargetArg::Rocm => Target::Rocm,
            TargetArg::Portable => Target::Portable,
        }
    }
}

/// `--packed` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PackedArg {
    /// Refuse packed weights with the remedy (default).
    Fail,
    /// Dequantize to f32, one chunk at a time.
    Dequantize,
    /// Keep the blocks packed, as planes of codes and scales the program contracts per block.
    Keep,
}

/// A failure reported as one sentence on stderr with exit code 1.
#[derive(Debug)]
struct Failure(String);

impl From<IrpaError> for Failure {
    fn from(e: IrpaError) -> Self {
        Failure(e.to_string())
    }
}

/// A pipeline error in the CLI's words: the library's message, and its remedy as the flag to pass.
impl From<tapeout::Error> for Failure {
    fn from(e: tapeout::Error) -> Self {
        let remedy = match e.remedy() {
            Some(Remedy::Dequantize) => "; to dequantize, pass --packed dequantize".to_owned(),
            Some(Remedy::ExternalAtOrBelow { bytes }) => {
                format!("; pass --inline-below {bytes} or less (without --inline-all)")
            }
            Some(Remedy::DeclareOutputs) => "; list them in the graph's \"outputs\"".to_owned(),
            Some(Remedy::AllowFilesOutsideGraphDir) => {
                "; move the file into the graph's directory, or pass --allow-files-outside-graph-dir if you trust \
                 this graph with every file you can read"
                    .to_owned()
            }
            Some(Remedy::BlockRowCodes) => {
                "; keep the codes in block rows: export without --packed-codes row-bands".to_owned()
            }
            _ => String::new(),
        };
        Failure(format!("{e}{remedy}"))
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Pack { output, data, splat, meta, iree_placement } => {
            let sub = matches.subcommand_matches("pack");
            pack(&output, &data, &splat, &meta, iree_placement, sub)
        }
        Command::Dump { files, json } => dump(&files, json),
        Command::Export {
            graph,
            weights,
            output,
            scope,
            inline_below,
            inline_all,
            packed,
            half,
            name,
            allow_files_outside_graph_dir,
            max_archive_bytes,
            layout,
            packed_codes,
            target,
            no_tuning,
            accept_pass_ops,
        } => 'export: {
            let bands = matches!(packed_codes, PackedCodesArg::RowBands);
            if bands && (!matches!(packed, PackedArg::Keep) || matches!(layout, LayoutArg::AsHeld)) {
                break 'export Err(Failure(
                    "--packed-codes row-bands lays out the codes of weights kept packed, in the layout chosen for \
                     their use: pass it with --packed keep and without --layout as-held"
                        .to_owned(),
                ));
            }
            let (target, tuning) = (Target::from(target), if no_tuning { Tuning::Off } else { Tuning::On });
            if bands && Forms::of(target, tuning) != Forms::Cpu {
                break 'export Err(Failure(format!(
                    "--packed-codes row-bands is a form of the llvm-cpu target's pass, which --target {target}{} \
                     does not write: drop it, or export for --target llvm-cpu with tuning on",
                    if no_tuning { " --no-tuning" } else { "" }
                )));
            }
            let policy = if inline_all {
                MaterializationPolicy::InlineAlways
            } else {
                MaterializationPolicy::SizeThreshold { bytes: inline_below, scope }
            };
            let packed = match packed {
                PackedArg::Fail => PackedConstantHandling::Fail,
                PackedArg::Dequantize => PackedConstantHandling::Dequantize,
                PackedArg::Keep => PackedConstantHandling::Keep,
            };
            let file_access =
                if allow_files_outside_graph_dir { FileAccess::Anywhere } else { FileAccess::WithinGraphDir };
            let half = match half {
                HalfArg::Keep => HalfConstantHandling::Keep,
                HalfArg::Widen => HalfConstantHandling::Widen,
            };
            let layout = match layout {
                LayoutArg::ForUse => WeightLayout::ChosenForUse,
                LayoutArg::AsHeld => WeightLayout::AsHeld,
            };
            let packed_codes = match packed_codes {
                PackedCodesArg::BlockRows => PackedCodesLayout::BlockRows,
                PackedCodesArg::RowBands => PackedCodesLayout::RowBands,
            };
            let opts = GraphFileExport {
                weights: weights.as_deref(),
                packed,
                half,
                policy,
                module_name: name,
                file_access,
                layout,
                packed_codes,
                target,
                tuning,
                pass_ops: if accept_pass_ops { PassOps::AcceptForEmitterTests } else { PassOps::Refuse },
                max_archive_bytes,
            };
            export(&graph, &opts, &output)
        }
        Command::Convert { input, output, dequantize, keep_dtype, include, exclude, rename, iree_placement } => {
            split_renames(&rename).and_then(|rename| {
                let opts = tapeout::ConvertOptions { dequantize, keep_dtype, include, exclude, rename, iree_placement };
                convert(&input, &output, &opts)
            })
        }
        Command::Verify { files } => verify(&files),
        Command::Extract { file, key, output } => extract(&file, &key, &output),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("tapeout: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn split_kv<'a>(arg: &'a str, what: &str) -> Result<(&'a str, &'a str), Failure> {
    arg.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| Failure(format!("{what} argument {arg:?} is not KEY=VALUE; write it as KEY=…")))
}

enum Planned<'a> {
    Data { key: &'a str, file: &'a str },
    Splat { key: &'a str, spec: &'a str },
}

fn pack(
    output: &Path,
    data: &[String],
    splat: &[String],
    meta: &[String],
    iree_placement: bool,
    matches: Option<&ArgMatches>,
) -> Result<(), Failure> {
    // Keep the command-line order across the positional and --splat entries; without parsed matches (a direct
    // call) the data entries keep their order and the splats follow them.
    let positions =
        |id: &str| -> Vec<usize> { matches.and_then(|m| m.indices_of(id)).map(|i| i.collect()).unwrap_or_default() };
    let mut planned: Vec<(usize, Planned<'_>)> = Vec::new();
    for (i, arg) in data.iter().enumerate() {
        let (key, file) = split_kv(arg, "data")?;
        planned.push((positions("data").get(i).copied().unwrap_or(i), Planned::Data { key, file }));
    }
    for (i, arg) in splat.iter().enumerate() {
        let (key, spec) = split_kv(arg, "--splat")?;
        planned.push((positions("splat").get(i).copied().unwrap_or(usize::MAX), Planned::Splat { key, spec }));
    }
    planned.sort_by_key(|(pos, _)| *pos);

    let mut metadata = std::collections::HashMap::new();
    for arg in meta {
        let (key, file) = split_kv(arg, "--meta")?;
        let bytes = std::fs::read(file).map_err(|e| Failure(format!("cannot read metadata file {file}: {e}")))?;
        metadata.insert(key, bytes);
    }

    let mut writer = ArchiveWriter::new().iree_placement(iree_placement);
    for (_, p) in &planned {
        match p {
            Planned::Data { key, file } => {
                let md = metadata.remove(key).unwrap_or_default(); // no --meta for it: no metadata
                writer.add_data_with_metadata(*key, md, FileRegionSource::whole(file)?)?;
            }
            Planned::Splat { key, spec } => {
                let (pattern, length) =
                    splat::parse(spec).map_err(|why| Failure(format!("--splat {key}={spec}: {why}")))?;
                let md = metadata.remove(key).unwrap_or_default();
                writer.add_splat_with_metadata(*key, md, &pattern, length)?;
            }
        }
    }
    if let Some(key) = metadata.keys().next() {
        return Err(Failure(format!("--meta names key {key:?}, which is not packed; add KEY=FILE or --splat for it")));
    }

    let mut meter = ProgressMeter::new();
    let summary = writer.write_with_progress(output, &mut |p| meter.update(p))?;
    meter.finish();
    println!(
        "wrote {} ({} entries, {} payload bytes, {} bytes on disk)",
        summary.path.display(),
        summary.entry_count,
        summary.data_bytes,
        summary.file_size
    );
    Ok(())
}

/// A `\r` progress line on stderr, shown only for large payloads on a terminal.
struct ProgressMeter {
    enabled: bool,
    shown: bool,
    start: Instant,
    last: Instant,
}

impl ProgressMeter {
    const THRESHOLD: u64 = 256 << 20;

    fn new() -> Self {
        let now = Instant::now();
        Self { enabled: std::io::stderr().is_terminal(), shown: false, start: now, last: now }
    }

    fn update(&mut self, p: Progress) {
        if !self.enabled || p.total <= Self::THRESHOLD || (self.last.elapsed().as_millis() < 200 && p.written < p.total)
        {
            return;
        }
        self.shown = true;
        self.last = Instant::now();
        let secs = self.start.elapsed().as_secs_f64().max(1e-6);
        #[allow(clippy::cast_precision_loss)] // display only
        let (done, all, rate) =
            (p.written as f64 / 1048576.0, p.total as f64 / 1048576.0, p.written as f64 / secs / 1e6);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{done:.0}/{all:.0} MiB  {rate:.0} MB/s ");
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.shown {
            eprintln!();
        }
    }
}

fn export(graph: &Path, opts: &GraphFileExport<'_>, out_dir: &Path) -> Result<(), Failure> {
    let mut meter = ProgressMeter::new();
    let s = tapeout::export_graph_file(graph, opts, out_dir, &mut |p| meter.update(p))?;
    meter.finish();
    for c in &s.key_collisions {
        eprintln!(
            "tapeout: warning: tensor '{}' wanted key {:?}, which is taken; it is stored as {:?}",
            c.tensor, c.wanted, c.assigned
        );
    }
    println!("wrote {} ({} bytes; {} inline constants)", s.mlir.display(), s.mlir_bytes, s.inline_constants);
    println!("wrote {} (the functions' arguments and results)", s.signature.display());
    if let Some(spec) = &s.tuning_spec {
        println!(
            "wrote {} (for a CPU build: iree-compile --iree-codegen-tuning-spec-path={} --mlir-disable-threading)",
            spec.display(),
            spec.display()
        );
    }
    match &s.archives.index {
        None => {
            #[allow(clippy::expect_used, reason = "an export without an index wrote exactly one archive")]
            let a = s.archives.archives.first().expect("an export without an index writes exactly one archive");
            println!("wrote {} ({} external parameters, {} bytes)", a.path.display(), s.externals, a.file_size);
        }
        Some(index) => {
            for a in &s.archives.archives {
                println!("wrote {} ({} parameters, {} bytes)", a.path.display(), a.entry_count, a.file_size);
            }
            println!(
                "wrote {} ({} external parameters in {} archives, {} bytes)",
                index.display(),
                s.externals,
                s.archives.archives.len(),
                s.archives.total_file_size()
            );
        }
    }
    println!("IREE loads them with: {}", s.parameters_flags.join(" "));
    Ok(())
}

fn split_renames(rename: &[String]) -> Result<Vec<(String, String)>, Failure> {
    rename.iter().map(|r| split_kv(r, "--rename").map(|(a, b)| (a.to_owned(), b.to_owned()))).collect()
}

fn convert(input: &Path, output: &Path, opts: &tapeout::ConvertOptions) -> Result<(), Failure> {
    let file = tapeout::graph::io::WeightFile::open(input).map_err(tapeout::Error::from)?;
    let mut meter = ProgressMeter::new();
    let s = tapeout::convert(&file, opts, output, &mut |p| meter.update(p))?;
    meter.finish();
    println!(
        "wrote {} ({} entries, {} payload bytes; {} decoded to f32, {} left out)",
        s.archive.path.display(),
        s.archive.entry_count,
        s.archive.data_bytes,
        s.converted,
        s.skipped
    );
    Ok(())
}

fn escape_key(key: &str) -> String {
    key.escape_debug().to_string()
}

/// An entry's metadata when it is tapeout's (`TENSORv0:` then a JSON object, `tapeout::TENSOR_METADATA_PREFIX`).
fn tensor_metadata(text: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_str(text.strip_prefix(tapeout::TENSOR_METADATA_PREFIX)?) {
        Ok(serde_json::Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// An entry's metadata for `dump --json`: tapeout's `TENSORv0:` object as JSON, other UTF-8 text as a string, other
/// bytes as hex (`null` when there is none).
fn metadata_json(metadata: &[u8]) -> serde_json::Value {
    if metadata.is_empty() {
        return serde_json::Value::Null;
    }
    match std::str::from_utf8(metadata) {
        Ok(text) => tensor_metadata(text).map_or_else(|| text.into(), serde_json::Value::Object),
        Err(_) => format!("0x{}", metadata.iter().map(|b| format!("{b:02x}")).collect::<String>()).into(),
    }
}

/// An entry's metadata for the `dump` table: tapeout's `TENSORv0:` object as `dtype [shape]` and its other fields
/// (`from=Q8_0`, `transposed_from=[16,64]`), other text escaped, other bytes as their count.
fn metadata_text(metadata: &[u8]) -> String {
    if metadata.is_empty() {
        return "-".to_owned();
    }
    let Ok(text) = std::str::from_utf8(metadata) else {
        return format!("{} bytes (binary)", metadata.len());
    };
    let Some(m) = tensor_metadata(text) else {
        return text.escape_debug().to_string();
    };
    let mut parts = Vec::new();
    if let Some(d) = m.get("dtype").and_then(serde_json::Value::as_str) {
        parts.push(d.to_owned());
    }
    if let Some(serde_json::Value::Array(dims)) = m.get("shape") {
        parts.push(format!("[{}]", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")));
    }
    parts.extend(m.iter().filter(|(k, _)| *k != "dtype" && *k != "shape").map(|(k, v)| match v {
        serde_json::Value::String(s) => format!("{k}={s}"),
        other => format!("{k}={other}"),
    }));
    parts.join(" ")
}

fn open_set(files: &[PathBuf]) -> Result<ArchiveSet, Failure> {
    Ok(ArchiveSet::open(files)?)
}

fn dump(files: &[PathBuf], json: bool) -> Result<(), Failure> {
    let set = open_set(files)?;
    let mut out = std::io::stdout().lock();
    let w = |r: std::io::Result<()>| r.map_err(|e| Failure(format!("cannot write to stdout: {e}")));
    let several = set.archives().len() > 1;
    for (path, archive) in set.archives() {
        if json {
            for e in archive.entries() {
                let mut obj = serde_json::json!({
                    "key": e.key,
                    "length": e.byte_len(),
                    "metadata_length": e.metadata.len(),
                    "metadata": metadata_json(e.metadata),
                });
                if several {
                    obj["file"] = path.display().to_string().into();
                }
                match e.payload {
                    Payload::Data(_) => {
                        let irpa::IndexKind::Data(r) = e.location.kind else { continue };
                        obj["type"] = "data".into();
                        obj["start"] = r.offset.into();
                        obj["end"] = (r.offset + r.length).into();
                    }
                    Payload::Splat { pattern, .. } => {
                        obj["type"] = "splat".into();
                        obj["pattern"] = pattern.iter().map(|b| format!("{b:02x}")).collect::<String>().into();
                    }
                }
                w(writeln!(out, "{obj}"))?;
            }
            continue;
        }
        let total: u64 = archive.entries().map(|e| e.byte_len()).sum();
        w(writeln!(
            out,
            "{}: {} entries, {} total bytes, file size {}",
            path.display(),
            archive.len(),
            total,
            archive.file_size()
        ))?;
        w(writeln!(out, "{:>14} | {:>14} | {:>14} | {:<5} | Key | Metadata", "Start", "End", "Length", "Type"))?;
        for e in archive.entries() {
            let (start, end, ty) = match e.location.kind {
                irpa::IndexKind::Data(r) => (r.offset.to_string(), (r.offset + r.length).to_string(), "data"),
                irpa::IndexKind::Splat { .. } => ("-".into(), "-".into(), "splat"),
            };
            w(writeln!(
                out,
                "{start:>14} | {end:>14} | {:>14} | {ty:<5} | `{}` | {}",
                e.byte_len(),
                escape_key(e.key),
                metadata_text(e.metadata)
            ))?;
        }
    }
    Ok(())
}

fn verify(files: &[PathBuf]) -> Result<(), Failure> {
    let set = open_set(files)?;
    for (path, archive) in set.archives() {
        let total: u64 = archive.entries().map(|e| e.byte_len()).sum();
        println!("{}: ok ({} entries, {} parameter bytes)", path.display(), archive.len(), total);
    }
    if set.archives().len() > 1 {
        println!("set: ok ({} archives, {} entries, each key in one archive)", set.archives().len(), set.len());
    }
    Ok(())
}

fn extract(path: &Path, key: &str, output: &Path) -> Result<(), Failure> {
    let set = open_set(&[path.to_path_buf()])?;
    let (_, entry) = set.get(key)?;
    irpa::write_atomically(output, |file| {
        let mut buf = std::io::BufWriter::with_capacity(1 << 20, file);
        entry.write_bytes_to(&mut buf)?;
        buf.flush()
    })?;
    println!("wrote {} ({} bytes of {key:?})", output.display(), entry.byte_len());
    Ok(())
}
