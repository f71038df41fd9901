//! The JSON graph format: tensors, nodes, outputs, and where each weight's bytes live.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use memmap2::Mmap;
use serde::Deserialize;
use std::sync::Arc;

use super::IoError;
use super::weights::{Stored, WeightFile};
use crate::dtype::DType;
use crate::ops::{OpKind, known_op_names};
use crate::packed::Encoding;
use crate::shape::{Dim, Shape};
use crate::tensor::{HalfLayout, Storage, Tensor, TensorSpec};
use crate::trace::{Attr, Attrs, TensorId, Trace};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraph {
    #[serde(default)]
    format: Option<String>,
    name: String,
    tensors: Vec<RawTensor>,
    #[serde(default)]
    nodes: Vec<RawNode>,
    #[serde(default)]
    outputs: Vec<String>,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    functions: Vec<RawFunction>,
}

/// One public function of a module: its own tensors (activations, inputs), nodes and results, over the
/// top-level tensors every function shares (the weights).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFunction {
    name: String,
    #[serde(default)]
    tensors: Vec<RawTensor>,
    nodes: Vec<RawNode>,
    outputs: Vec<String>,
    #[serde(default)]
    inputs: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    name: String,
    shape: Vec<serde_json::Value>,
    dtype: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    data: Option<RawData>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    #[serde(default, alias = "safetensors")]
    tensor: Option<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default)]
    mapped: bool,
    #[serde(default)]
    column_major: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    op: String,
    #[serde(default)]
    inputs: Vec<String>,
    outputs: Vec<String>,
    #[serde(default)]
    attrs: serde_json::Map<String, serde_json::Value>,
}

/// Where a weight's bytes are: a safetensors entry or a raw file region (the path as the graph wrote it,
/// joined to the graph's directory).
#[derive(Debug, Clone)]
enum Source {
    Named(String),
    File(PathBuf, u64),
}

/// Which files a graph's `"data": {"file": …}` entries may name.
///
/// A graph file is untrusted input (it is shared like a model card), so by default it may only name files
/// in its own directory tree: an absolute path, a `..` that leaves the tree, or a symlink that resolves
/// outside it is an error. The program that builds a graph itself (the Kotlin tape over JNI) names files of
/// its own choosing and uses [`FileAccess::Anywhere`], as does a user who trusts a graph and says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileAccess {
    /// Only files inside the graph file's directory tree (the default).
    #[default]
    WithinGraphDir,
    /// Any file the process can read.
    Anywhere,
}

#[derive(Debug, Clone)]
struct WeightRef {
    source: Source,
    encoding: Option<Encoding>,
    mapped: bool,
    column_major: bool,
}

/// A parsed graph file (no weights loaded yet).
#[derive(Debug)]
pub struct GraphFile {
    path: PathBuf,
    access: FileAccess,
    /// The module name.
    pub name: String,
    specs: Vec<TensorSpec>,
    weights: Vec<Option<WeightRef>>,
    index: HashMap<String, usize>,
    functions: Vec<Function>,
}

/// One function of a graph file: indices into the graph's one tensor table.
#[derive(Debug)]
struct Function {
    name: String,
    nodes: Vec<(OpKind, Attrs, Vec<usize>, Vec<usize>)>,
    outputs: Vec<usize>,
    forced: Vec<usize>,
}

/// The memory-mapped weight files a graph refers to.
pub struct WeightSet {
    weights: Option<WeightFile>,
    /// Raw files by the name the graph writes: the path opened, the open file, its mapping.
    files: HashMap<PathBuf, (PathBuf, Arc<File>, Mmap)>,
}

/// An attribute value: integers stay integers (one above `i64::MAX` is an error, not a lossy float), any
/// other number is a float.
fn attr(v: &serde_json::Value) -> Result<Attr, &'static str> {
    use serde_json::Value;
    let too_big = "is an integer above 9223372036854775807 (i64::MAX)";
    let float = |n: &serde_json::Number| -> Result<f64, &'static str> {
        if n.is_u64() && n.as_i64().is_none() {
            return Err(too_big);
        }
        n.as_f64().ok_or("is not a finite number")
    };
    Ok(match v {
        Value::Bool(b) => Attr::Bool(*b),
        Value::String(s) => Attr::Str(s.clone()),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Attr::Int(i),
            None => Attr::Float(float(n)?),
        },
        Value::Array(items) => {
            if let Some(ints) = items.iter().map(Value::as_i64).collect::<Option<Vec<_>>>() {
                Attr::Ints(ints)
            } else {
                let num = |v: &Value| v.as_number().ok_or("has an element that is not a number").and_then(float);
                Attr::Floats(items.iter().map(num).collect::<Result<Vec<_>, _>>()?)
            }
        }
        Value::Null | Value::Object(_) => return Err("has an unsupported value (null or an object)"),
    })
}

impl GraphFile {
    /// Reads and checks a graph file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, IoError> {
        let path = path.as_ref().to_path_buf();
        let text = std::fs::read_to_string(&path).map_err(|source| IoError::Io { path: path.clone(), source })?;
        Self::parse(&text, &path)
    }

    /// Parses graph JSON; `path` names the file in errors and anchors relative weight paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, IoError> {
        let bad = |detail: String| IoError::Format { path: path.to_path_buf(), format: "graph JSON", detail };
        let raw: RawGraph = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if let Some(f) = &raw.format {
            if f != "tapeout-graph/1" {
                return Err(bad(format!("format {f:?} is not supported; this tapeout reads \"tapeout-graph/1\"")));
            }
        }
        let mut specs = Vec::new();
        let mut weights = Vec::new();
        let mut parse_tensor = |t: RawTensor, scope: &mut HashMap<String, usize>, what: &str| -> Result<(), IoError> {
            if scope.contains_key(&t.name) {
                return Err(bad(format!("{what}tensor {:?} is declared twice", t.name)));
            }
            let dtype = DType::parse(&t.dtype)
                .ok_or_else(|| bad(format!("{what}tensor {:?}: unknown dtype {:?}", t.name, t.dtype)))?;
            let dims = t
                .shape
                .iter()
                .map(|d| match d {
                    serde_json::Value::Null => Some(Dim::Dynamic),
                    serde_json::Value::String(s) if s == "?" => Some(Dim::Dynamic),
                    v => v.as_u64().map(Dim::Static),
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad(format!("{what}tensor {:?}: shape entries must be sizes or \"?\"", t.name)))?;
            let mut spec = TensorSpec::new(t.name.clone(), Shape(dims), dtype);
            spec.path = t.path;
            let weight = t
                .data
                .map(|d| {
                    let source = match (d.tensor, d.file) {
                        (Some(s), None) => Source::Named(s),
                        (None, Some(f)) => Source::File(PathBuf::from(f), d.offset),
                        _ => {
                            return Err(bad(format!(
                                "{what}tensor {:?}: data needs exactly one of \"tensor\" (in the --weights file) or \"file\"",
                                t.name
                            )));
                        }
                    };
                    Ok(WeightRef {
                        source,
                        encoding: d.encoding.as_deref().map(Encoding::parse),
                        mapped: d.mapped,
                        column_major: d.column_major,
                    })
                })
                .transpose()?;
            scope.insert(t.name, specs.len());
            specs.push(spec);
            weights.push(weight);
            Ok(())
        };
        let mut index = HashMap::new();
        for t in raw.tensors {
            parse_tensor(t, &mut index, "")?;
        }
        let single = raw.functions.is_empty();
        let raw_functions = if single {
            vec![RawFunction {
                name: "main".into(),
                tensors: Vec::new(),
                nodes: raw.nodes,
                outputs: raw.outputs,
                inputs: raw.inputs,
            }]
        } else {
            if !raw.nodes.is_empty() || !raw.outputs.is_empty() || !raw.inputs.is_empty() {
                return Err(bad(
                    "a graph with \"functions\" keeps its nodes, outputs and inputs inside each function".into()
                ));
            }
            raw.functions
        };
        // Which function declares each local tensor, for messages about another function's tensors.
        let mut owner: HashMap<String, String> = HashMap::new();
        let mut scopes = Vec::with_capacity(raw_functions.len());
        let mut seen_names = HashSet::new();
        for f in &raw_functions {
            if !seen_names.insert(f.name.clone()) {
                return Err(bad(format!("two functions are named {:?}; give each its own name", f.name)));
            }
        }
        let mut functions = Vec::with_capacity(raw_functions.len());
        for f in raw_functions {
            let what = if single { String::new() } else { format!("function {:?}: ", f.name) };
            let mut scope = index.clone();
            for t in f.tensors {
                if index.contains_key(&t.name) {
                    return Err(bad(format!(
                        "{what}tensor {:?} is also a top-level (shared) tensor; give it another name",
                        t.name
                    )));
                }
                owner.entry(t.name.clone()).or_insert_with(|| f.name.clone());
                parse_tensor(t, &mut scope, &what)?;
            }
            let lookup = |name: &str, at: &str| {
                scope.get(name).copied().ok_or_else(|| match owner.get(name) {
                    Some(other) if !single && *other != f.name => bad(format!(
                        "{what}{at} refers to tensor {name:?} of function {other:?}; functions share only the \
                         top-level tensors"
                    )),
                    _ => bad(format!("{what}{at} refers to unknown tensor {name:?}")),
                })
            };
            let mut nodes = Vec::with_capacity(f.nodes.len());
            for (n, node) in f.nodes.iter().enumerate() {
                let at = format!("node {n} (op '{}')", node.op);
                let op = OpKind::from_name(&node.op).ok_or_else(|| {
                    bad(format!("{what}{at}: unknown op '{}'. Known ops: {}", node.op, known_op_names()))
                })?;
                let ins = node.inputs.iter().map(|s| lookup(s, &at)).collect::<Result<Vec<_>, _>>()?;
                let outs = node.outputs.iter().map(|s| lookup(s, &at)).collect::<Result<Vec<_>, _>>()?;
                if !single {
                    if let Some(o) = node.outputs.iter().find(|o| index.contains_key(*o)) {
                        return Err(bad(format!(
                            "{what}{at} writes the top-level tensor {o:?}; a function's results and activations are \
                             declared in its own \"tensors\""
                        )));
                    }
                }
                let mut attrs = Attrs::new();
                for (k, v) in &node.attrs {
                    attrs.insert(k.clone(), attr(v).map_err(|why| bad(format!("{what}{at}: attribute {k:?} {why}")))?);
                }
                nodes.push((op, attrs, ins, outs));
            }
            let outputs = f.outputs.iter().map(|s| lookup(s, "outputs")).collect::<Result<Vec<_>, _>>()?;
            let forced = f.inputs.iter().map(|s| lookup(s, "inputs")).collect::<Result<Vec<_>, _>>()?;
            scopes.push(scope);
            functions.push(Function { name: f.name, nodes, outputs, forced });
        }
        // The single-function form keeps its names at the top level.
        #[allow(clippy::expect_used, reason = "the single-function form pushed exactly one scope above")]
        let index = if single { scopes.pop().expect("the single-function form has one function") } else { index };
        Ok(Self {
            path: path.to_path_buf(),
            access: FileAccess::default(),
            name: raw.name,
            specs,
            weights,
            index,
            functions,
        })
    }

    /// The same graph with another policy for the files its data entries name (default:
    /// [`FileAccess::WithinGraphDir`]).
    #[must_use]
    pub fn with_file_access(mut self, access: FileAccess) -> Self {
        self.access = access;
        self
    }

    /// The graph file's directory, which relative `data.file` paths are resolved against.
    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Checks a `data.file` path as written, before anything is opened: under [`FileAccess::WithinGraphDir`],
    /// an absolute path, or `..` components that climb above the graph's directory, are refused.
    fn check_written(&self, tensor: &str, written: &Path) -> Result<(), IoError> {
        if self.access == FileAccess::Anywhere {
            return Ok(());
        }
        let outside = |why: &'static str| IoError::OutsideGraphDir {
            graph: self.path.clone(),
            tensor: tensor.to_owned(),
            file: written.to_path_buf(),
            why,
        };
        let mut depth = 0i64;
        for c in written.components() {
            match c {
                Component::Prefix(_) | Component::RootDir => return Err(outside("it is an absolute path")),
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                Component::CurDir => {}
            }
            if depth < 0 {
                return Err(outside("its `..` leaves the graph's directory"));
            }
        }
        Ok(())
    }

    /// Opens a data file for tensor `tensor`, enforcing the file policy on the file actually opened: the path
    /// is resolved (symlinks included) and checked before the open, and the opened file's own real path is
    /// checked after it, so a symlink swapped in between cannot slip a file from elsewhere in. Only regular
    /// files are accepted (never a FIFO or device, which could block or never end).
    fn open_data_file(&self, tensor: &str, written: &Path, path: &Path) -> Result<File, IoError> {
        let io = |source| IoError::Io { path: path.to_path_buf(), source };
        self.check_written(tensor, written)?;
        let confined = self.access == FileAccess::WithinGraphDir;
        let root = if confined { Some(std::fs::canonicalize(self.dir()).map_err(io)?) } else { None };
        let outside = |why: &'static str| IoError::OutsideGraphDir {
            graph: self.path.clone(),
            tensor: tensor.to_owned(),
            file: written.to_path_buf(),
            why,
        };
        if let Some(root) = &root {
            let real = std::fs::canonicalize(path).map_err(io)?;
            if !real.starts_with(root) {
                return Err(outside("it resolves (through a symlink) to a file outside the graph's directory"));
            }
        }
        let file = open_nonblocking(path).map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(IoError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
            });
        }
        if let Some(root) = &root {
            match opened_real_path(&file) {
                Some(real) if real.starts_with(root) => {}
                Some(_) => {
                    return Err(outside(
                        "the file opened is outside the graph's directory (it changed after the check)",
                    ));
                }
                None => {} // no way to ask on this platform: the check before the open stands
            }
        }
        Ok(file)
    }

    /// The tensor ids listed under `"inputs"` (forced graph inputs) of the first function.
    #[must_use]
    pub fn forced_inputs(&self) -> HashSet<TensorId> {
        self.forced_inputs_of(0)
    }

    /// The names of the module's functions (`main` for a graph without `"functions"`).
    #[must_use]
    pub fn function_names(&self) -> Vec<&str> {
        self.functions.iter().map(|f| f.name.as_str()).collect()
    }

    /// The forced inputs of function `f` (an index into [`Self::function_names`]).
    #[must_use]
    pub fn forced_inputs_of(&self, f: usize) -> HashSet<TensorId> {
        // A function index past the end has no forced inputs (as it has no nodes).
        self.functions.get(f).map(|f| f.forced.iter().map(|&i| TensorId::at(i)).collect()).unwrap_or_default()
    }

    /// The id of the tensor called `name`.
    #[must_use]
    pub fn tensor_id(&self, name: &str) -> Option<TensorId> {
        self.index.get(name).map(|&i| TensorId::at(i))
    }

    /// Builds the trace of the first function, borrowing every weight from `weights`.
    pub fn to_trace<'a>(&self, weights: &'a WeightSet) -> Result<Trace<'a>, IoError> {
        self.to_trace_of(0, weights, |_, _| None)
    }

    /// Builds the trace; `provide(i, spec)` may supply the storage of tensor `i` itself (the JNI
    /// binding lends JVM arrays this way), otherwise the graph's own `data` is used.
    pub fn to_trace_with<'a>(
        &self,
        weights: &'a WeightSet,
        provide: impl FnMut(usize, &TensorSpec) -> Option<Storage<'a>>,
    ) -> Result<Trace<'a>, IoError> {
        self.to_trace_of(0, weights, provide)
    }

    /// The trace of function `f` (an index into [`Self::function_names`]) over the graph's one tensor table:
    /// the same [`TensorId`] is the same tensor in every function, so a shared weight is one constant under one key.
    pub fn to_trace_of<'a>(
        &self,
        f: usize,
        weights: &'a WeightSet,
        mut provide: impl FnMut(usize, &TensorSpec) -> Option<Storage<'a>>,
    ) -> Result<Trace<'a>, IoError> {
        let function = self.functions.get(f).ok_or_else(|| IoError::Format {
            path: self.path.clone(),
            format: "graph JSON",
            detail: format!("no function #{f}"),
        })?;
        let mut trace = Trace::new();
        for (i, (spec, w)) in self.specs.iter().zip(&self.weights).enumerate() {
            let storage = match (provide(i, spec), w) {
                (Some(s), _) => s,
                (None, None) => Storage::None,
                (None, Some(w)) => self.storage(spec, w, weights)?,
            };
            trace.add_tensor(Tensor { spec: spec.clone(), storage });
        }
        for (op, attrs, ins, outs) in &function.nodes {
            let ins: Vec<_> = ins.iter().map(|&i| TensorId::at(i)).collect();
            let outs: Vec<_> = outs.iter().map(|&i| TensorId::at(i)).collect();
            trace.record(*op, attrs.clone(), &ins, &outs);
        }
        trace.set_outputs(&function.outputs.iter().map(|&i| TensorId::at(i)).collect::<Vec<_>>());
        Ok(trace)
    }
}

impl GraphFile {
    /// The storage of one weight, borrowed from `weights`.
    fn storage<'a>(&self, spec: &TensorSpec, w: &WeightRef, weights: &'a WeightSet) -> Result<Storage<'a>, IoError> {
        let bad = |detail: String| IoError::Format {
            path: self.path.clone(),
            format: "graph JSON",
            detail: format!("tensor {:?}: {detail}", spec.name),
        };
        let layout = if w.column_major { HalfLayout::ColumnMajor } else { HalfLayout::RowMajor };
        let count = spec.shape.element_count();
        if let (true, Source::File(written, offset)) = (w.mapped, &w.source) {
            // A mapped region is read by the program at run time, never by tapeout; its path is still held to
            // the graph's directory as written.
            self.check_written(spec.label(), written)?;
            let path = self.dir().join(written);
            let len = count.filter(|_| !spec.shape.is_dynamic()).and_then(|n| n.checked_mul(spec.dtype.byte_width()));
            let len = len.ok_or_else(|| {
                bad(format!(
                    "a mapped file region needs a static shape whose byte size fits 64 bits, not [{}]",
                    spec.shape
                ))
            })?;
            return Ok(Storage::Mapped { path, offset: *offset, len });
        }
        let (bytes, stored) = match &w.source {
            Source::Named(name) => {
                let file = weights.weights.as_ref().ok_or_else(|| {
                    bad("its data names a tensor of the weights file; pass --weights FILE.safetensors|FILE.gguf".into())
                })?;
                let t =
                    file.get(name).ok_or_else(|| bad(format!("no tensor {name:?} in {}", file.path().display())))?;
                match (&t.stored, &w.encoding) {
                    // Packed bytes stored as a plain byte tensor (safetensors): the graph names the encoding.
                    (Stored::Dense(DType::U8), Some(e)) => (t.bytes, Stored::Packed(e.clone())),
                    (Stored::Packed(e), Some(want)) if e != want => {
                        return Err(bad(format!("the file stores it as {e}, the graph says {want}")));
                    }
                    (stored, _) => {
                        if spec.shape.static_dims().is_some_and(|d| d != t.shape) {
                            return Err(bad(format!(
                                "shape [{}] differs from the stored shape {:?}",
                                spec.shape, t.shape
                            )));
                        }
                        (t.bytes, stored.clone())
                    }
                }
            }
            Source::File(path, offset) => {
                let (_, _, map) =
                    weights.files.get(path).ok_or_else(|| bad(format!("{} is not open", path.display())))?;
                let start = usize::try_from(*offset).map_err(|_| bad("offset too large".into()))?;
                let stored = match &w.encoding {
                    Some(e) => Stored::Packed(e.clone()),
                    None => Stored::Dense(spec.dtype),
                };
                // A raw file region is as long as the tensor needs.
                let want = match &stored {
                    Stored::Packed(e) => count.and_then(|n| e.physical_bytes(n)),
                    Stored::Dense(d) => count.and_then(|n| n.checked_mul(d.byte_width())),
                }
                .ok_or_else(|| bad("a raw-file weight needs a static shape (and whole blocks)".into()))?;
                let end = usize::try_from(want).ok().and_then(|n| start.checked_add(n));
                let bytes = end.and_then(|e| map.get(start..e)).ok_or_else(|| {
                    bad(format!(
                        "{} holds {} bytes after offset {offset}, {want} needed",
                        path.display(),
                        map.len().saturating_sub(start)
                    ))
                })?;
                (bytes, stored)
            }
        };
        if w.mapped {
            let (path, offset) = match &w.source {
                Source::File(p, o) => (self.dir().join(p), *o),
                Source::Named(_) => {
                    #[allow(clippy::expect_used, reason = "the match above returned an error without a weights file")]
                    let file = weights.weights.as_ref().expect("a named weight was read from the weights file above");
                    (file.path().to_path_buf(), 0)
                }
            };
            return Ok(Storage::Mapped { path, offset, len: bytes.len() as u64 });
        }
        let dtype = match &stored {
            Stored::Dense(d) => *d,
            Stored::Packed(_) => DType::F32,
        };
        if dtype != spec.dtype {
            return Err(bad(format!("it is declared {} but its stored data is {dtype}", spec.dtype)));
        }
        Ok(super::weights::storage_of(&stored, bytes, layout))
    }
}

/// Opens `path` read-only without blocking on a FIFO (the caller then refuses anything but a regular file).
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_NONBLOCK);
    o.open(path)
}

/// The real path of an open file, as the kernel knows it (Linux: `/proc/self/fd`), or `None` where it cannot
/// be asked.
fn opened_real_path(file: &File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

impl WeightSet {
    /// Maps the weights file (safetensors or GGUF, if any) and every raw file the graph names.
    pub fn open(graph: &GraphFile, weights: Option<&Path>) -> Result<Self, IoError> {
        let weights = weights.map(WeightFile::open).transpose()?;
        let mut files = HashMap::new();
        for (spec, w) in graph.specs.iter().zip(&graph.weights) {
            let Some(WeightRef { source: Source::File(written, _), mapped: false, .. }) = w else { continue };
            if !files.contains_key(written) {
                let path = graph.dir().join(written);
                let f = graph.open_data_file(spec.label(), written, &path)?;
                // SAFETY: read-only mapping of a weight file that must not change during export.
                let map = unsafe { Mmap::map(&f) }.map_err(|source| IoError::Io { path: path.clone(), source })?;
                files.insert(written.clone(), (path, Arc::new(f), map));
            }
        }
        Ok(Self { weights, files })
    }

    /// Where `bytes` come from when they lie inside one of this set's mappings (the weights file, or a raw file
    /// the graph names): the open file, its path and the offset. The export then lets the kernel copy them file to
    /// file, from the handle that was opened and checked, never from the path reopened.
    #[must_use]
    pub fn file_region(&self, bytes: &[u8]) -> Option<(&Arc<File>, &Path, u64)> {
        let within = |map: &[u8]| -> Option<u64> {
            let (start, at) = (map.as_ptr().addr(), bytes.as_ptr().addr());
            let inside = !bytes.is_empty() && at >= start && at - start + bytes.len() <= map.len();
            inside.then(|| (at - start) as u64)
        };
        let weights = self.weights.as_ref().and_then(|w| {
            let (file, map) = w.mapping();
            within(map).map(|offset| (file, w.path(), offset))
        });
        weights.or_else(|| {
            self.files.values().find_map(|(path, file, map)| within(map).map(|offset| (file, path.as_path(), offset)))
        })
    }
}
