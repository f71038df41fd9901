//! The compute graph and constant extraction (`finalize`).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::constant::ConstantData;
use crate::dtype::DType;
use crate::error::{GraphError, Result};
use crate::ops;
use crate::ops::OpKind;
use crate::packed::{BlockOrder, Encoding};
use crate::shape::Shape;
use crate::tensor::{HalfLayout, Lent, Storage, TensorSpec};
use crate::trace::{Attr, Attrs};
use crate::trace::{Op, TensorId, Trace};

/// What to do with a frozen weight stored as packed (quantized) blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PackedConstantHandling {
    /// Refuse with [`GraphError::PackedConstant`] (the default): never silently demote the
    /// weight to a function argument.
    #[default]
    Fail,
    /// Decode to f32 while exporting, one chunk of blocks at a time.
    Dequantize,
    /// Keep the blocks packed: each weight becomes planes of integer codes and per-block scales
    /// ([`Plane`](crate::Plane)) and its uses become ops on them, so that the program contracts the codes per block
    /// and never materializes the f32 weight for a linear layer or an embedding ([`crate::keep`]).
    Keep,
}

/// What to do with a frozen f16/bf16 weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HalfConstantHandling {
    /// Store its own 16-bit bytes (the default): the archive entry and the module's parameter have its dtype,
    /// and the program converts it to f32 where it is used. Half the archive of widening, and IREE fuses the
    /// convert into the consumer. A column-major weight is widened (its row-major order needs a transpose).
    #[default]
    Keep,
    /// Widen to f32 while exporting, one chunk at a time: f32 parameters, twice the bytes.
    Widen,
}

/// The layout a weight is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightLayout {
    /// Chosen for its use (the default): a rank-2 weight whose uses are one 2-D `transpose` (a PyTorch-layout
    /// `[out, in]` linear, `x @ Wᵀ`) and, optionally, gathers of its rows (a tied embedding and LM head) is
    /// written transposed, tile by tile from any lender, and the transpose leaves the program, so IREE contracts
    /// the parameter as stored instead of materializing a transposed copy of it.
    #[default]
    ChosenForUse,
    /// As the caller holds it.
    AsHeld,
}

/// Options of [`finalize`].
#[derive(Debug, Clone, Default)]
pub struct ExtractOptions {
    /// Tensors that become graph inputs whatever their storage.
    pub forced_inputs: HashSet<TensorId>,
    /// Packed weights: fail (default) or dequantize.
    pub packed: PackedConstantHandling,
    /// 16-bit float weights: kept as stored (default) or widened to f32.
    pub half: HalfConstantHandling,
    /// Weights written in the layout their use wants (default) or as held.
    pub layout: WeightLayout,
}

/// A frozen value of the graph, with its stable parameter key.
#[derive(Debug, Clone)]
pub struct Constant<'a> {
    /// The tensor it provides.
    pub tensor: TensorId,
    /// The parameter key: the module path when the tensor has one, unique in the graph.
    pub key: String,
    /// Its values, produced lazily from the borrowed storage.
    pub data: ConstantData<'a>,
}

/// A key that had to be changed because another constant already had it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCollision {
    /// The tensor whose key was changed.
    pub tensor: String,
    /// The key it asked for.
    pub wanted: String,
    /// The key it got.
    pub assigned: String,
}

/// A validated graph: inputs, constants, nodes in topological order, explicit outputs. Only
/// [`finalize`] makes one, so its invariants hold: nodes in topological order, one producer per tensor,
/// unique constant keys.
#[derive(Debug)]
pub struct ComputeGraph<'a> {
    tensors: Vec<TensorSpec>,
    inputs: Vec<TensorId>,
    constants: Vec<Constant<'a>>,
    constant_of: HashMap<TensorId, usize>,
    nodes: Vec<Op>,
    outputs: Vec<TensorId>,
    key_collisions: Vec<KeyCollision>,
}

impl<'a> ComputeGraph<'a> {
    /// The spec of `id` (a dequantized or widened weight's spec says f32).
    ///
    /// # Panics
    /// When `id` is not a tensor of the trace this graph was made from.
    #[must_use]
    pub fn spec(&self, id: TensorId) -> &TensorSpec {
        &self.tensors[id.index()]
    }

    /// Specs of every tensor, indexed by [`TensorId::index`].
    #[must_use]
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// Runtime inputs (function arguments), in first-use order.
    #[must_use]
    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    /// Frozen values, in first-use order, one per tensor however many nodes use it.
    #[must_use]
    pub fn constants(&self) -> &[Constant<'a>] {
        &self.constants
    }

    /// The constant providing `id`, if any.
    #[must_use]
    pub fn constant(&self, id: TensorId) -> Option<&Constant<'a>> {
        self.constant_of.get(&id).map(|&i| &self.constants[i])
    }

    /// Nodes (the trace's ops) in topological order.
    #[must_use]
    pub fn nodes(&self) -> &[Op] {
        &self.nodes
    }

    /// The model's results.
    #[must_use]
    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// Keys changed to keep them unique, for the user to see.
    #[must_use]
    pub fn key_collisions(&self) -> &[KeyCollision] {
        &self.key_collisions
    }

    /// How messages name `node` (see [`Op::describe`]).
    #[must_use]
    pub fn describe(&self, node: &Op) -> String {
        node.describe(|t| self.tensors.get(t.index()))
    }
}

/// Checks references, producers and outputs; returns the producer of every produced tensor.
fn check_structure(trace: &Trace<'_>) -> Result<Vec<Option<usize>>> {
    let tensors = trace.tensors();
    let n = tensors.len();
    let describe = |op: &Op| op.describe(|t| tensors.get(t.index()).map(|x| &x.spec));
    let mut producer: Vec<Option<usize>> = vec![None; n];
    for (i, op) in trace.ops().iter().enumerate() {
        let dangling = |port, index, t: TensorId| GraphError::DanglingReference {
            node: describe(op),
            op: op.op.name(),
            port,
            index,
            tensor: t.index(),
        };
        if let Some((index, t)) = op.inputs.iter().enumerate().find(|(_, t)| t.index() >= n) {
            return Err(dangling("input", index, *t));
        }
        for (index, t) in op.outputs.iter().enumerate() {
            let slot = producer.get_mut(t.index()).ok_or_else(|| dangling("output", index, *t))?;
            if let Some(first) = slot.replace(i) {
                return Err(GraphError::DuplicateProducer {
                    tensor: tensors[t.index()].spec.label().to_owned(),
                    first: describe(&trace.ops()[first]),
                    second: describe(op),
                });
            }
        }
    }
    if trace.outputs().is_empty() {
        return Err(GraphError::NoOutputs);
    }
    if let Some((index, t)) = trace.outputs().iter().enumerate().find(|(_, t)| t.index() >= n) {
        return Err(GraphError::BadOutput { index, tensor: t.index() });
    }
    Ok(producer)
}

/// Topological order of the ops in O(N + E): the recording order when it is already valid,
/// otherwise Kahn's algorithm (deterministic: ties broken by recording order of readiness).
fn topological_order(trace: &Trace<'_>, producer: &[Option<usize>]) -> Result<Vec<usize>> {
    let ops = trace.ops();
    let mut seen = vec![false; ops.len()];
    let in_order = ops.iter().enumerate().all(|(i, op)| {
        let ok = op.inputs.iter().all(|t| producer[t.index()].is_none_or(|p| seen[p]));
        seen[i] = true;
        ok
    });
    if in_order {
        return Ok((0..ops.len()).collect());
    }
    let mut pending = vec![0usize; ops.len()];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
    for (i, op) in ops.iter().enumerate() {
        for t in &op.inputs {
            if let Some(p) = producer[t.index()] {
                pending[i] += 1;
                consumers[p].push(i);
            }
        }
    }
    let mut ready: VecDeque<usize> = (0..ops.len()).filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(ops.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &c in &consumers[i] {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.push_back(c);
            }
        }
    }
    if order.len() < ops.len() {
        let tensors = trace.tensors();
        let nodes = one_cycle(trace, producer, &pending)
            .into_iter()
            .map(|i| ops[i].describe(|t| tensors.get(t.index()).map(|x| &x.spec)))
            .collect();
        return Err(GraphError::Cycle { nodes });
    }
    Ok(order)
}

/// One cycle among the ops Kahn's algorithm could not order (`pending[i] > 0`), in data-flow order.
///
/// Every such op has an unordered producer among its inputs, so walking from one to such a producer
/// must revisit an op: the ops between the two visits are a cycle, and nothing downstream of it is named.
fn one_cycle(trace: &Trace<'_>, producer: &[Option<usize>], pending: &[usize]) -> Vec<usize> {
    let ops = trace.ops();
    let Some(start) = (0..ops.len()).find(|&i| pending[i] > 0) else { return Vec::new() };
    let mut visited_at: HashMap<usize, usize> = HashMap::new();
    let mut walk = Vec::new();
    let mut at = start;
    loop {
        if let Some(&first) = visited_at.get(&at) {
            let mut cycle = walk[first..].to_vec();
            cycle.reverse(); // the walk went against the data flow
            return cycle;
        }
        visited_at.insert(at, walk.len());
        walk.push(at);
        let next = ops[at].inputs.iter().filter_map(|t| producer[t.index()]).find(|&p| pending[p] > 0);
        match next {
            Some(p) => at = p,
            None => return walk, // cannot happen for an unordered op; name what was seen
        }
    }
}

/// Checks one node against the op table: its arity ([`GraphError::Arity`]), then its op's type rules on the
/// operand and result specs and the attributes ([`GraphError::TypeMismatch`]), naming the node.
fn check_signature(op: &Op, specs: &[TensorSpec]) -> Result<()> {
    let sig = op.op.signature();
    let describe = || op.describe(|t| specs.get(t.index()));
    for (port, arity, found) in [("input", sig.inputs, op.inputs.len()), ("output", sig.outputs, op.outputs.len())] {
        if !arity.accepts(found) {
            return Err(GraphError::Arity {
                node: describe(),
                op: op.op.name(),
                port,
                expected: arity.to_string(),
                found,
            });
        }
    }
    let view = |ids: &[TensorId]| -> Vec<_> {
        ids.iter().map(|t| (&specs[t.index()].shape, specs[t.index()].dtype)).collect()
    };
    ops::check_types(op.op, &op.attrs, &view(&op.inputs), &view(&op.outputs))
        .map_err(|detail| GraphError::TypeMismatch { node: describe(), op: op.op.name(), detail })
}

fn mismatch(spec: &TensorSpec, storage: &'static str, detail: String) -> GraphError {
    GraphError::StorageMismatch { tensor: spec.label().to_owned(), storage, detail }
}

/// Applies the decision table to one unresolved tensor: `None` means "graph input".
fn classify<'a>(
    id: TensorId,
    spec: &mut TensorSpec,
    storage: &Storage<'a>,
    opts: &ExtractOptions,
    computes_in_stored: bool,
) -> Result<Option<ConstantData<'a>>> {
    // 1. forced inputs (storage not even looked at).
    if opts.forced_inputs.contains(&id) {
        return Ok(None);
    }
    // 2. dynamic shapes: never compute a volume.
    let Some(count) = spec.shape.element_count().filter(|_| !spec.shape.is_dynamic()) else {
        if spec.shape.is_dynamic() {
            return Ok(None);
        }
        return Err(mismatch(spec, storage.kind(), format!("element count of [{}] overflows 64 bits", spec.shape)));
    };
    let expect_bytes = |width: u64| count.checked_mul(width);
    match storage {
        // 3. dense f32: borrow the original buffer.
        Storage::F32(values) => {
            if spec.dtype != DType::F32 {
                return Err(mismatch(spec, storage.kind(), format!("spec dtype is {}, storage holds f32", spec.dtype)));
            }
            if values.len() != count {
                return Err(mismatch(spec, storage.kind(), format!("{} values for {count} elements", values.len())));
            }
            Ok(Some(ConstantData::F32(*values)))
        }
        // 4. dense f16/bf16: widened lazily.
        Storage::Half { bytes, layout } => {
            if !matches!(spec.dtype, DType::F16 | DType::BF16) {
                return Err(mismatch(spec, storage.kind(), format!("spec dtype is {}, not f16 or bf16", spec.dtype)));
            }
            if Some(bytes.len()) != expect_bytes(2) {
                return Err(mismatch(spec, storage.kind(), format!("{} bytes for {count} elements", bytes.len())));
            }
            let dims = match layout {
                HalfLayout::RowMajor => [count, 1],
                HalfLayout::ColumnMajor => match spec.shape.static_dims().as_deref() {
                    Some(&[r, c]) if bytes.as_slice().is_some() => [r, c],
                    Some(&[_, _]) => {
                        return Err(mismatch(
                            spec,
                            storage.kind(),
                            "column-major data must be addressable memory".into(),
                        ));
                    }
                    _ => return Err(mismatch(spec, storage.kind(), "column-major layout needs a rank-2 shape".into())),
                },
            };
            let from = spec.dtype;
            // Ops that compute in the weight's own type see it as stored (widening it would be pointless);
            // otherwise the program sees f32, however it is stored.
            if computes_in_stored {
                if *layout == HalfLayout::RowMajor {
                    return Ok(Some(ConstantData::Raw { dtype: from, bytes: *bytes }));
                }
            } else {
                spec.dtype = DType::F32;
            }
            if opts.half == HalfConstantHandling::Keep && *layout == HalfLayout::RowMajor {
                return Ok(Some(ConstantData::Raw { dtype: from, bytes: *bytes }));
            }
            Ok(Some(ConstantData::Widen { from, bytes: *bytes, layout: *layout, dims }))
        }
        // 5./6. packed blocks: fail loudly, or dequantize lazily.
        Storage::Packed { encoding, order, bytes } => {
            if opts.packed == PackedConstantHandling::Fail {
                let name = match encoding {
                    Encoding::Other(n) if n.is_empty() => None,
                    e => Some(e.name().to_owned()),
                };
                return Err(GraphError::PackedConstant {
                    tensor: spec.label().to_owned(),
                    path: spec.path.clone(),
                    encoding: name,
                });
            }
            let cannot = |detail: String| GraphError::CannotDecode { tensor: spec.label().to_owned(), detail };
            if encoding.block_geometry().is_none() {
                return Err(cannot(format!(
                    "encoding {encoding} is not one tapeout decodes ({}); load it dense",
                    Encoding::decodable_names()
                )));
            }
            if *order != BlockOrder::RowMajor {
                return Err(cannot(format!("block order {order} is not supported; only row-major (GGML) blocks are")));
            }
            match encoding.physical_bytes(count) {
                Some(b) if b == bytes.len() => {}
                Some(b) => {
                    return Err(mismatch(
                        spec,
                        storage.kind(),
                        format!("{} bytes, {encoding} of {count} values is {b}", bytes.len()),
                    ));
                }
                None => {
                    return Err(mismatch(
                        spec,
                        storage.kind(),
                        format!("{count} values are not whole {encoding} blocks"),
                    ));
                }
            }
            spec.dtype = DType::F32;
            Ok(Some(ConstantData::Dequantize { encoding: encoding.clone(), bytes: *bytes, elements: count }))
        }
        // Dense bytes of other dtypes (integer tables, masks): frozen as stored.
        Storage::Dense(bytes) => {
            if Some(bytes.len()) != expect_bytes(spec.dtype.byte_width()) {
                return Err(mismatch(
                    spec,
                    storage.kind(),
                    format!("{} bytes for {count} {} elements", bytes.len(), spec.dtype),
                ));
            }
            Ok(Some(ConstantData::Raw { dtype: spec.dtype, bytes: *bytes }))
        }
        // 7. mapped regions and shape-only placeholders: runtime inputs.
        Storage::Mapped { .. } | Storage::None => Ok(None),
    }
}

/// Assigns stable, unique keys: the module path, else the trace name, else `param.<n>`.
fn assign_keys(constants: &mut [Constant<'_>], specs: &[TensorSpec]) -> Vec<KeyCollision> {
    let mut taken: HashSet<String> = HashSet::with_capacity(constants.len());
    let mut collisions = Vec::new();
    for (n, c) in constants.iter_mut().enumerate() {
        let spec = &specs[c.tensor.index()];
        let wanted = match (&spec.path, spec.name.is_empty()) {
            (Some(path), _) if !path.is_empty() => path.clone(),
            (_, false) => spec.name.clone(),
            _ => format!("param.{n}"),
        };
        let mut key = wanted.clone();
        let mut suffix = 1u64;
        while taken.contains(&key) {
            key = format!("{wanted}.{suffix}");
            suffix += 1;
        }
        if key != wanted {
            collisions.push(KeyCollision { tensor: spec.name.clone(), wanted, assigned: key.clone() });
        }
        taken.insert(key.clone());
        c.key = key;
    }
    collisions
}

/// True when `node` swaps the two dimensions of a rank-2 operand (`perm` absent, i.e. reversed, or `[1, 0]`).
pub(crate) fn swaps_two_dims(node: &Op) -> bool {
    node.op == OpKind::Transpose
        && match node.attrs.get("perm") {
            None => true,
            Some(Attr::Ints(p)) => p.as_slice() == [1, 0] || p.as_slice() == [-1, -2],
            Some(_) => false,
        }
}

/// True when `node` gathers rows (axis 0) of a rank-2 `table` operand.
fn gathers_rows_of(node: &Op, table: TensorId) -> bool {
    node.op == OpKind::Gather
        && node.inputs.first() == Some(&table)
        && node.inputs.get(1) != Some(&table)
        && matches!(node.attrs.get("axis"), None | Some(Attr::Int(0 | -2)))
}

/// [`WeightLayout::ChosenForUse`]: a rank-2 `[rows, cols]` constant, not a graph output, that the program only
/// contracts on its last dimension is written transposed ([`ConstantData::Transposed`]) under its own key, and
/// the program uses it as stored:
/// - its one use is a 2-D transpose (a PyTorch-layout `[out, in]` linear): the transpose's result becomes the
///   constant and the transpose node leaves;
/// - its uses are one such transpose and gathers of its rows (a tied embedding and LM head): the same, and each
///   gather reads columns of the stored `[cols, rows]` table (`gather` along axis 1, then a transpose of the
///   small gathered activation). Measured with IREE 3.13 (docs/performance.md): for a decode step, the table as
///   held makes IREE keep a transposed copy of it (2.0× the archive in RSS); stored transposed, 1.03×.
///
/// Constants whose values cannot be streamed transposed within the tile budget stay as held.
fn transpose_at_export<'a>(
    constants: &mut [Constant<'a>],
    nodes: &mut Vec<Op>,
    specs: &mut Vec<TensorSpec>,
    outputs: &[TensorId],
) {
    let mut uses: HashMap<TensorId, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for &t in &n.inputs {
            uses.entry(t).or_default().push(i);
        }
    }
    let mut removed = HashSet::new();
    let mut inserted: Vec<(usize, Op)> = Vec::new(); // (after node, op)
    for c in constants.iter_mut() {
        let Some(used_by) = uses.get(&c.tensor) else { continue };
        let Some(&[rows, cols]) = specs[c.tensor.index()].shape.static_dims().as_deref() else { continue };
        if outputs.contains(&c.tensor) || !crate::transpose::transposable(&c.data, rows, cols) {
            continue;
        }
        let (swaps, others): (Vec<usize>, Vec<usize>) = used_by.iter().partition(|&&i| swaps_two_dims(&nodes[i]));
        let [swap] = swaps.as_slice() else { continue };
        let [out] = nodes[*swap].outputs.as_slice() else { continue };
        let out = *out;
        let gathers_rows = |i: usize| {
            let n = &nodes[i];
            gathers_rows_of(n, c.tensor) && n.outputs.len() == 1 && !specs[n.outputs[0].index()].shape.0.is_empty()
        };
        if !others.iter().all(|&i| gathers_rows(i)) {
            continue;
        }
        // Gathers of rows become gathers of columns of the stored table, then a transpose of what they gathered.
        for &i in &others {
            let gathered = nodes[i].outputs[0];
            let spec = specs[gathered.index()].clone();
            let rank = spec.shape.0.len();
            let Some((&width, ids)) = spec.shape.0.split_last() else { continue }; // checked above
            let columns = TensorId::at(specs.len());
            let dims = std::iter::once(width).chain(ids.iter().copied()).collect();
            specs.push(TensorSpec::new(format!("{}_columns", spec.name), Shape(dims), spec.dtype));
            let node = &mut nodes[i];
            node.inputs[0] = out;
            node.attrs.insert("axis".into(), Attr::Int(1));
            node.outputs[0] = columns;
            let perm: Vec<i64> = (1..rank).chain([0]).map(|d| d as i64).collect();
            let mut attrs = Attrs::new();
            attrs.insert("perm".into(), Attr::Ints(perm));
            inserted.push((
                i,
                Op { index: node.index, op: OpKind::Transpose, attrs, inputs: vec![columns], outputs: vec![gathered] },
            ));
        }
        c.tensor = out;
        let held = std::mem::replace(&mut c.data, ConstantData::F32(Lent::Slice(&[])));
        c.data = ConstantData::Transposed { of: Box::new(held), rows, cols };
        removed.insert(*swap);
    }
    let old = std::mem::take(nodes);
    for (i, node) in old.into_iter().enumerate() {
        if !removed.contains(&i) {
            nodes.push(node);
        }
        nodes.extend(inserted.iter().filter(|(after, _)| *after == i).map(|(_, op)| op.clone()));
    }
}

/// Turns a trace into a [`ComputeGraph`]: validates it, orders it, and decides for every tensor
/// that no op produces whether it is a runtime input or a frozen constant.
///
/// Decision table, first match wins: forced input → input; dynamic shape → input; dense f32 →
/// constant borrowing the buffer; dense f16/bf16 → constant kept as stored and converted in the program
/// ([`HalfConstantHandling::Keep`], the default) or widened lazily; packed → error
/// ([`PackedConstantHandling::Fail`]) or constant dequantized lazily; other dense dtypes →
/// constant as stored; mapped or shape-only → input.
pub fn finalize<'a>(trace: &Trace<'a>, opts: &ExtractOptions) -> Result<ComputeGraph<'a>> {
    let producer = check_structure(trace)?;
    let order = topological_order(trace, &producer)?;
    let (tensors, ops) = (trace.tensors(), trace.ops());
    let mut specs: Vec<TensorSpec> = tensors.iter().map(|t| t.spec.clone()).collect();

    // A 16-bit weight is seen in its own type when an op (other than a convert) computes in that type: one of
    // its results, or another of its operands, has it. Otherwise ops see it as f32.
    let mut in_stored: HashSet<TensorId> = HashSet::new();
    for op in ops.iter().filter(|op| op.op != OpKind::Convert) {
        for &t in &op.inputs {
            let d = specs[t.index()].dtype;
            if !matches!(d, DType::F16 | DType::BF16) || !matches!(tensors[t.index()].storage, Storage::Half { .. }) {
                continue;
            }
            let others = op.inputs.iter().filter(|&&o| o != t).chain(&op.outputs);
            if others.into_iter().any(|&o| specs[o.index()].dtype == d) {
                in_stored.insert(t);
            }
        }
    }
    let mut inputs = Vec::new();
    let mut constants = Vec::new();
    let mut resolved: HashSet<TensorId> = HashSet::new();
    let first_uses = order.iter().flat_map(|&i| ops[i].inputs.iter()).chain(trace.outputs());
    for &id in first_uses {
        if producer[id.index()].is_some() || !resolved.insert(id) {
            continue;
        }
        match classify(id, &mut specs[id.index()], &tensors[id.index()].storage, opts, in_stored.contains(&id))? {
            Some(data) => constants.push(Constant { tensor: id, key: String::new(), data }),
            None => inputs.push(id),
        }
    }
    // Types are checked as the program will see them: widened and dequantized weights are f32.
    for &i in &order {
        check_signature(&ops[i], &specs)?;
    }
    let key_collisions = assign_keys(&mut constants, &specs);
    let mut nodes: Vec<Op> = order.into_iter().map(|i| ops[i].clone()).collect();
    if opts.packed == PackedConstantHandling::Keep {
        crate::keep::keep_packed(&mut constants, &mut nodes, &mut specs, trace.outputs())?;
    }
    if opts.layout == WeightLayout::ChosenForUse {
        transpose_at_export(&mut constants, &mut nodes, &mut specs, trace.outputs());
    }
    let constant_of = constants.iter().enumerate().map(|(i, c)| (c.tensor, i)).collect();
    Ok(ComputeGraph {
        tensors: specs,
        inputs,
        constants,
        constant_of,
        nodes,
        outputs: trace.outputs().to_vec(),
        key_collisions,
    })
}
