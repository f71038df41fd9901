//! The JSON graph format: tensors, nodes, outputs, and where each weight's bytes live.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use serde::Deserialize;

use super::IoError;
use super::safetensors::SafeTensors;
use crate::dtype::DType;
use crate::packed::{BlockOrder, Encoding};
use crate::shape::{Dim, Shape};
use crate::tensor::{HalfLayout, Lent, Storage, Tensor, TensorSpec};
use crate::trace::{Attr, Attrs, TensorId, Trace};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraph {
    #[serde(default)]
    format: Option<String>,
    name: String,
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
    #[serde(default)]
    safetensors: Option<String>,
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

/// Where a weight's bytes are: a safetensors entry or a raw file region.
#[derive(Debug, Clone)]
enum Source {
    SafeTensors(String),
    File(PathBuf, u64),
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
    /// The module name.
    pub name: String,
    specs: Vec<TensorSpec>,
    weights: Vec<Option<WeightRef>>,
    index: HashMap<String, usize>,
    nodes: Vec<(String, Attrs, Vec<usize>, Vec<usize>)>,
    outputs: Vec<usize>,
    forced: Vec<usize>,
}

/// The memory-mapped weight files a graph refers to.
pub struct WeightSet {
    safetensors: Option<SafeTensors>,
    files: HashMap<PathBuf, Mmap>,
}

fn attr(v: &serde_json::Value) -> Option<Attr> {
    use serde_json::Value;
    Some(match v {
        Value::Bool(b) => Attr::Bool(*b),
        Value::String(s) => Attr::Str(s.clone()),
        Value::Number(n) => n.as_i64().map_or_else(|| Attr::Float(n.as_f64().unwrap_or(f64::NAN)), Attr::Int),
        Value::Array(items) => {
            if let Some(ints) = items.iter().map(Value::as_i64).collect::<Option<Vec<_>>>() {
                Attr::Ints(ints)
            } else {
                Attr::Floats(items.iter().map(Value::as_f64).collect::<Option<Vec<_>>>()?)
            }
        }
        Value::Null | Value::Object(_) => return None,
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
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let mut index = HashMap::new();
        let mut specs = Vec::with_capacity(raw.tensors.len());
        let mut weights = Vec::with_capacity(raw.tensors.len());
        for (i, t) in raw.tensors.into_iter().enumerate() {
            if index.insert(t.name.clone(), i).is_some() {
                return Err(bad(format!("tensor {:?} is declared twice", t.name)));
            }
            let dtype = DType::parse(&t.dtype)
                .ok_or_else(|| bad(format!("tensor {:?}: unknown dtype {:?}", t.name, t.dtype)))?;
            let dims = t
                .shape
                .iter()
                .map(|d| match d {
                    serde_json::Value::Null => Some(Dim::Dynamic),
                    serde_json::Value::String(s) if s == "?" => Some(Dim::Dynamic),
                    v => v.as_u64().map(Dim::Static),
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad(format!("tensor {:?}: shape entries must be sizes or \"?\"", t.name)))?;
            let mut spec = TensorSpec::new(t.name.clone(), Shape(dims), dtype);
            spec.path = t.path;
            specs.push(spec);
            weights.push(
                t.data
                    .map(|d| {
                        let source = match (d.safetensors, d.file) {
                            (Some(s), None) => Source::SafeTensors(s),
                            (None, Some(f)) => Source::File(dir.join(f), d.offset),
                            _ => {
                                return Err(bad(format!(
                                    "tensor {:?}: data needs exactly one of \"safetensors\" or \"file\"",
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
                    .transpose()?,
            );
        }
        let lookup = |name: &str, what: &str| {
            index.get(name).copied().ok_or_else(|| bad(format!("{what} refers to unknown tensor {name:?}")))
        };
        let mut nodes = Vec::with_capacity(raw.nodes.len());
        for (n, node) in raw.nodes.iter().enumerate() {
            let what = format!("node {n} (op '{}')", node.op);
            let ins = node.inputs.iter().map(|s| lookup(s, &what)).collect::<Result<Vec<_>, _>>()?;
            let outs = node.outputs.iter().map(|s| lookup(s, &what)).collect::<Result<Vec<_>, _>>()?;
            let mut attrs = Attrs::new();
            for (k, v) in &node.attrs {
                attrs.insert(
                    k.clone(),
                    attr(v).ok_or_else(|| bad(format!("{what}: attribute {k:?} has an unsupported value")))?,
                );
            }
            nodes.push((node.op.clone(), attrs, ins, outs));
        }
        let outputs = raw.outputs.iter().map(|s| lookup(s, "outputs")).collect::<Result<Vec<_>, _>>()?;
        let forced = raw.inputs.iter().map(|s| lookup(s, "inputs")).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { path: path.to_path_buf(), name: raw.name, specs, weights, index, nodes, outputs, forced })
    }

    /// The tensor ids listed under `"inputs"` (forced graph inputs).
    #[must_use]
    pub fn forced_inputs(&self) -> HashSet<TensorId> {
        self.forced.iter().map(|&i| TensorId(i)).collect()
    }

    /// The id of the tensor called `name`.
    #[must_use]
    pub fn tensor_id(&self, name: &str) -> Option<TensorId> {
        self.index.get(name).map(|&i| TensorId(i))
    }

    /// Builds the trace, borrowing every weight from `weights`.
    pub fn to_trace<'a>(&self, weights: &'a WeightSet) -> Result<Trace<'a>, IoError> {
        let bad = |detail: String| IoError::Format { path: self.path.clone(), format: "graph JSON", detail };
        let mut trace = Trace::new();
        for (spec, w) in self.specs.iter().zip(&self.weights) {
            let storage = match w {
                None => Storage::None,
                Some(w) => {
                    let (mut bytes, stored) =
                        weights.bytes(&w.source).map_err(|d| bad(format!("tensor {:?}: {d}", spec.name)))?;
                    if let Source::File(path, _) = &w.source {
                        // A raw file region is as long as the tensor needs.
                        let count = spec.shape.element_count();
                        let want = match &w.encoding {
                            Some(e) => count.and_then(|n| e.physical_bytes(n)),
                            None => count.and_then(|n| n.checked_mul(spec.dtype.byte_width())),
                        }
                        .ok_or_else(|| {
                            bad(format!("tensor {:?}: a raw-file weight needs a static shape", spec.name))
                        })?;
                        bytes = usize::try_from(want).ok().and_then(|n| bytes.get(..n)).ok_or_else(|| {
                            bad(format!(
                                "tensor {:?}: {} holds {} bytes, {want} needed",
                                spec.name,
                                path.display(),
                                bytes.len()
                            ))
                        })?;
                    }
                    if w.mapped {
                        let (path, offset) = match &w.source {
                            Source::File(p, o) => (p.clone(), *o),
                            Source::SafeTensors(_) => (weights.safetensors_path().unwrap_or_default(), 0),
                        };
                        Storage::Mapped { path, offset, len: bytes.len() as u64 }
                    } else if let Some(encoding) = &w.encoding {
                        Storage::Packed {
                            encoding: encoding.clone(),
                            order: BlockOrder::RowMajor,
                            bytes: Lent::Slice(bytes),
                        }
                    } else {
                        let dtype = stored.filter(|_| w.encoding.is_none()).unwrap_or(spec.dtype);
                        if dtype != spec.dtype {
                            return Err(bad(format!(
                                "tensor {:?} is {} but its stored data is {dtype}",
                                spec.name, spec.dtype
                            )));
                        }
                        match dtype {
                            DType::F32 => Storage::F32(Lent::Slice(
                                f32_view(bytes).map_err(|d| bad(format!("tensor {:?}: {d}", spec.name)))?,
                            )),
                            DType::F16 | DType::BF16 => Storage::Half {
                                bytes: Lent::Slice(bytes),
                                layout: if w.column_major { HalfLayout::ColumnMajor } else { HalfLayout::RowMajor },
                            },
                            _ => Storage::Dense(Lent::Slice(bytes)),
                        }
                    }
                }
            };
            trace.add_tensor(Tensor { spec: spec.clone(), storage });
        }
        for (op, attrs, ins, outs) in &self.nodes {
            let ins: Vec<_> = ins.iter().map(|&i| TensorId(i)).collect();
            let outs: Vec<_> = outs.iter().map(|&i| TensorId(i)).collect();
            trace.record(op, attrs.clone(), &ins, &outs);
        }
        trace.set_outputs(&self.outputs.iter().map(|&i| TensorId(i)).collect::<Vec<_>>());
        Ok(trace)
    }
}

/// Views little-endian f32 bytes as `&[f32]` without copying (aligned, little-endian host).
fn f32_view(bytes: &[u8]) -> Result<&[f32], String> {
    if cfg!(target_endian = "big") {
        return Err("f32 weights are borrowed as-is only on little-endian hosts".into());
    }
    bytemuck::try_cast_slice(bytes)
        .map_err(|e| format!("f32 data cannot be borrowed in place ({e:?}); align it to 4 bytes"))
}

impl WeightSet {
    /// Maps the safetensors file (if any) and every raw file the graph names.
    pub fn open(graph: &GraphFile, safetensors: Option<&Path>) -> Result<Self, IoError> {
        let safetensors = safetensors.map(SafeTensors::open).transpose()?;
        let mut files = HashMap::new();
        for w in graph.weights.iter().flatten() {
            if let Source::File(p, _) = &w.source {
                if !files.contains_key(p) {
                    let io = |source| IoError::Io { path: p.clone(), source };
                    let f = File::open(p).map_err(io)?;
                    // SAFETY: read-only mapping of a weight file that must not change during export.
                    let map = unsafe { Mmap::map(&f) }.map_err(io)?;
                    files.insert(p.clone(), map);
                }
            }
        }
        Ok(Self { safetensors, files })
    }

    fn safetensors_path(&self) -> Option<PathBuf> {
        self.safetensors.as_ref().map(|s| s.path().to_path_buf())
    }

    /// The bytes of a source and, for safetensors, the stored dtype.
    fn bytes(&self, source: &Source) -> Result<(&[u8], Option<DType>), String> {
        match source {
            Source::SafeTensors(name) => {
                let st = self
                    .safetensors
                    .as_ref()
                    .ok_or("the graph names safetensors weights; pass --weights FILE.safetensors")?;
                let t = st.get(name).ok_or_else(|| format!("no tensor {name:?} in {}", st.path().display()))?;
                Ok((st.bytes(t), Some(t.dtype)))
            }
            Source::File(path, offset) => {
                let map = self.files.get(path).ok_or_else(|| format!("{} is not open", path.display()))?;
                let start = usize::try_from(*offset).map_err(|_| "offset too large".to_string())?;
                let bytes =
                    map.get(start..).ok_or_else(|| format!("offset {offset} is past the end of {}", path.display()))?;
                Ok((bytes, None))
            }
        }
    }
}
