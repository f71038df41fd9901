//! The compute graph and constant extraction (`finalize`).

use std::collections::{HashMap, HashSet, VecDeque};

pub use crate::constant::Constant;

use crate::constant::{ConstantData, disagreement};
use crate::dtype::DType;
use crate::error::{GraphError, Result};
use crate::ops;
use crate::ops::OpKind;
use crate::packed::{BlockOrder, Encoding};
use crate::pass::{self, Program};
use crate::target::{Forms, Target, Tuning};
use crate::tensor::{HalfLayout, Storage, TensorSpec};
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
    /// and never materializes the f32 weight for a linear layer or an embedding (the `keep_packed` rewrite).
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

/// How the codes of a Q8_0 or Q4_0 weight kept packed ([`PackedConstantHandling::Keep`]) are laid out, when the
/// export chooses layouts ([`WeightLayout::ChosenForUse`]). The values and every result are the same; what differs
/// is which access IREE 3.13's CPU code streams faster, and that depends on the CPU
/// (docs/performance.md#weights-in-iree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PackedCodesLayout {
    /// `[Kb, 32, N]`: a decode step's product gives a workgroup each block row (the default). It is the faster
    /// of the two on some AVX-512 CPUs, and it suits every weight.
    #[default]
    BlockRows,
    /// Row bands of 32 rows, `[N / 32, Kb, 32, 32]`, for a weight no use gathers rows of and whose rows 32 divides
    /// (Q4_0's padded to 64): a decode step's product gives a workgroup each band, one contiguous run of codes.
    /// On other AVX-512 CPUs it is the faster of the two. A prefill's few-rows products read the stored bands too,
    /// so IREE keeps no copy of the codes. The Kotlin API's
    /// `KEEP_ROW_BANDS` asks for it. A weight one function of a module gathers and another multiplies cannot be
    /// banded in one and not the other: the export refuses it.
    RowBands,
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
    /// With the layout chosen for use: the codes of Q8_0 and Q4_0 weights kept packed in block rows (default) or
    /// in row bands (a CPU form: [`Forms::Cpu`] only).
    pub packed_codes: PackedCodesLayout,
    /// The device the module is for (default `llvm-cpu`): which device pass, if any, adds its forms to the
    /// portable lowering.
    pub target: Target,
    /// Whether the target's forms are written (default) or the portable lowering alone.
    pub tuning: Tuning,
    /// Whether the recorded graph may name the ops and attributes only passes write
    /// ([`OpKind::inserted_by_passes`], [`OpKind::pass_attribute`]): refused (the default) for every front end;
    /// accepted only by tapeout's own tests of how the emitter lowers them.
    pub pass_ops: PassOps,
}

/// Whether a recorded graph may name what only passes write ([`ExtractOptions::pass_ops`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PassOps {
    /// Refused with [`GraphError::PassOnly`] (the default).
    #[default]
    Refuse,
    /// Accepted, for tapeout's own tests of the emitter's lowering of them.
    AcceptForEmitterTests,
}

impl ExtractOptions {
    /// The forms [`finalize`] writes with these options.
    #[must_use]
    pub fn forms(&self) -> Forms {
        Forms::of(self.target, self.tuning)
    }
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
    forms: Forms,
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

    /// The forms its rewrites wrote: the portable lowering alone, or with a device pass's forms.
    #[must_use]
    pub fn forms(&self) -> Forms {
        self.forms
    }

    /// Runtime inputs (function arguments), in the order the trace declared them (its tensor table).
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

    /// Nodes in topological order: the trace's ops, and those the rewrites inserted ([`Op::is_inserted`]).
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

/// Turns a trace into a [`ComputeGraph`]: validates it, orders it, and decides for every tensor
/// that no op produces whether it is a runtime input or a frozen constant.
///
/// Decision table, first match wins: forced input → input; dynamic shape → input; dense f32 →
/// constant borrowing the buffer; dense f16/bf16 → constant kept as stored and converted in the program
/// ([`HalfConstantHandling::Keep`], the default) or widened lazily; packed → error
/// ([`PackedConstantHandling::Fail`]) or constant dequantized lazily; other dense dtypes →
/// constant as stored; mapped or shape-only → input.
///
/// Then the rewrites the options ask for run, each a pass from one program to the next: `keep_packed`
/// ([`PackedConstantHandling::Keep`]), then `transpose_at_export` ([`WeightLayout::ChosenForUse`]). What each
/// produces is checked as the recorded graph was; a rule it breaks is [`GraphError::PassBroke`], a bug to report.
///
/// # Errors
/// Any [`GraphError`]: what the recorded graph or its storage breaks, a weight that cannot be kept packed, or
/// [`GraphError::PassBroke`].
pub fn finalize<'a>(trace: &Trace<'a>, opts: &ExtractOptions) -> Result<ComputeGraph<'a>> {
    check_options(opts)?;
    if opts.pass_ops == PassOps::Refuse {
        check_recordable(trace)?;
    }
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
    // Function arguments in the order the trace declared them (its tensor table), not the order ops first read
    // them: a caller passes `(tokens, positions)` as it declared them, whichever the model happens to use first.
    inputs.sort_unstable_by_key(|t| t.index());
    // Types are checked as the program will see them: widened and dequantized weights are f32.
    for &i in &order {
        check_signature(&ops[i], &specs)?;
    }
    let key_collisions = assign_keys(&mut constants, &specs);
    let nodes: Vec<Op> = order.into_iter().map(|i| ops[i].clone()).collect();
    let mut program =
        Program { specs, inputs, constants, nodes, outputs: trace.outputs().to_vec(), next_index: ops.len() };
    // The rewrites, each verified: what they produce passes the checks the recorded graph passed.
    // The device pass's say in them: the CPU's forms, or none (the portable lowering).
    let forms = opts.forms();
    let bands = opts.layout == WeightLayout::ChosenForUse && opts.packed_codes == PackedCodesLayout::RowBands;
    let device = crate::target::device_forms(forms, bands);
    let device = device.as_ref();
    if opts.packed == PackedConstantHandling::Keep {
        program = pass::keep_packed(program, device)?;
        verify(&program, "keep_packed")?;
    }
    if opts.layout == WeightLayout::ChosenForUse {
        program = pass::transpose_at_export(program, device);
        verify(&program, "transpose_at_export")?;
    }
    program = device.rewrite(program)?;
    verify(&program, "the device's rewrite")?;
    let Program { specs, inputs, constants, nodes, outputs, .. } = program;
    let constant_of = constants.iter().enumerate().map(|(i, c)| (c.tensor, i)).collect();
    Ok(ComputeGraph { tensors: specs, inputs, constants, constant_of, nodes, outputs, key_collisions, forms })
}

/// Refuses a recorded op, or attribute, that only passes write ([`GraphError::PassOnly`]).
fn check_recordable(trace: &Trace<'_>) -> Result<()> {
    let tensors = trace.tensors();
    for op in trace.ops() {
        let what = if op.op.inserted_by_passes() {
            format!("op '{}'", op.op)
        } else if let Some(attr) = op.op.pass_attribute(&op.attrs) {
            format!("attribute '{attr}' of op '{}'", op.op)
        } else {
            continue;
        };
        return Err(GraphError::PassOnly { node: op.describe(|t| tensors.get(t.index()).map(|x| &x.spec)), what });
    }
    Ok(())
}

/// Refuses options that contradict each other: codes in row bands are a CPU form, which an export for another
/// target, or with its tuning off, does not write.
fn check_options(opts: &ExtractOptions) -> Result<()> {
    if opts.packed_codes == PackedCodesLayout::RowBands && opts.forms() != Forms::Cpu {
        let why = match opts.tuning {
            Tuning::Off => "with the target's tuning off".to_owned(),
            Tuning::On => format!("for the target {}", opts.target),
        };
        return Err(GraphError::Options {
            detail: format!(
                "codes in row bands (packed codes layout RowBands) are a form of the llvm-cpu pass, which an export \
                 {why} does not write; use the block-rows layout, or export for llvm-cpu with tuning on"
            ),
        });
    }
    Ok(())
}

/// Checks what the rewrite `pass` produced as [`finalize`] checks what the user recorded: every tensor id names a
/// tensor, every node reads only tensors defined before it (an input, a constant, or an earlier node's result),
/// every tensor has at most one definition, the outputs are defined, every node fits its op's signature
/// ([`check_signature`]), and every constant has a unique key and values that agree with its tensor's spec.
///
/// # Errors
/// [`GraphError::PassBroke`], naming the pass and the node (or constant, or output) where a rule breaks.
fn verify(program: &Program<'_>, pass: &'static str) -> Result<()> {
    /// What defines a tensor.
    #[derive(Clone, Copy)]
    enum Def {
        Input,
        Constant(usize),
        Node(usize),
    }
    let broke = |node: String, detail: String| GraphError::PassBroke { pass, node, detail };
    let name = |d: Def| match d {
        Def::Input => "a runtime input".to_owned(),
        Def::Constant(i) => format!("constant '{}'", program.constants[i].key),
        Def::Node(i) => program.describe(&program.nodes[i]),
    };
    let specs = &program.specs;
    // Where each tensor is defined: `None` until it is.
    let mut defined: Vec<Option<Def>> = vec![None; specs.len()];
    let define = |defined: &mut [Option<Def>], t: TensorId, by: Def, at: &dyn Fn() -> String| -> Result<()> {
        let Some(slot) = defined.get_mut(t.index()) else {
            return Err(broke(at(), format!("tensor #{} does not exist", t.index())));
        };
        match slot.replace(by) {
            Some(first) => Err(broke(at(), format!("tensor #{} is already defined, by {}", t.index(), name(first)))),
            None => Ok(()),
        }
    };
    for &t in &program.inputs {
        define(&mut defined, t, Def::Input, &|| format!("runtime input #{}", t.index()))?;
    }
    let mut keys = HashSet::with_capacity(program.constants.len());
    for (i, c) in program.constants.iter().enumerate() {
        let at = || name(Def::Constant(i));
        define(&mut defined, c.tensor, Def::Constant(i), &at)?;
        if !keys.insert(c.key.as_str()) {
            return Err(broke(at(), "another constant has its key".into()));
        }
        if let Some(detail) = disagreement(&specs[c.tensor.index()], &c.data) {
            return Err(broke(at(), detail));
        }
    }
    for (i, node) in program.nodes.iter().enumerate() {
        let at = || name(Def::Node(i));
        for (port, t) in node.inputs.iter().enumerate() {
            let detail = match defined.get(t.index()) {
                Some(Some(_)) => continue,
                None => format!("input {port} is tensor #{}, which does not exist", t.index()),
                Some(None) => format!("input {port}, tensor #{}, is read before it is defined", t.index()),
            };
            return Err(broke(at(), detail));
        }
        for &t in &node.outputs {
            define(&mut defined, t, Def::Node(i), &at)?;
        }
        check_signature(node, specs).map_err(|e| broke(at(), e.to_string()))?;
    }
    if program.outputs.is_empty() {
        return Err(broke("the graph outputs".into(), "there are none".into()));
    }
    for (i, t) in program.outputs.iter().enumerate() {
        if !matches!(defined.get(t.index()), Some(Some(_))) {
            return Err(broke(format!("graph output {i}"), format!("tensor #{} is not defined", t.index())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Shape;
    use crate::tensor::Lent;
    use crate::trace::Attrs;

    /// x [2] (input), w [2] (constant), y = add(x, w) recorded as node 0; outputs [y].
    fn recorded(w: &[f32]) -> Program<'_> {
        let specs = ["x", "w", "y"].map(|n| TensorSpec::new(n, Shape::of(&[2]), DType::F32)).to_vec();
        let (x, wt, y) = (TensorId::at(0), TensorId::at(1), TensorId::at(2));
        let mut t = Trace::new();
        t.record(OpKind::Add, Attrs::new(), &[x, wt], &[y]);
        Program {
            specs,
            inputs: vec![x],
            constants: vec![Constant { tensor: wt, key: "w".into(), data: ConstantData::F32(Lent::Slice(w)) }],
            nodes: t.ops().to_vec(),
            outputs: vec![y],
            next_index: 1,
        }
    }

    fn broke(p: &Program<'_>) -> (String, String) {
        match verify(p, "test_pass") {
            Err(GraphError::PassBroke { pass: "test_pass", node, detail }) => (node, detail),
            other => panic!("expected PassBroke from test_pass, got {other:?}"),
        }
    }

    #[test]
    fn a_well_formed_program_passes() {
        verify(&recorded(&[1.0, 2.0]), "test_pass").unwrap();
    }

    #[test]
    fn an_inserted_op_reading_a_tensor_before_its_definition_is_caught_and_named_by_its_origin() {
        let w = [1.0, 2.0];
        let mut p = recorded(&w);
        // A rewrite inserts z = neg(y) for node 0, but puts it before node 0, which defines y.
        p.specs.push(TensorSpec::new("z", Shape::of(&[2]), DType::F32));
        let z = TensorId::at(3);
        let neg =
            pass::Fresh::from(p.next_index).op(Some(0), OpKind::Neg, Attrs::new(), vec![TensorId::at(2)], vec![z]);
        p.nodes.insert(0, neg);
        p.outputs = vec![z];
        let (node, detail) = broke(&p);
        assert_eq!(node, "node 0 (neg -> 'z', op #1 inserted for it by a rewrite)");
        assert!(detail.contains("tensor #2") && detail.contains("before it is defined"), "{detail}");
    }

    #[test]
    fn an_inserted_op_whose_types_do_not_fit_is_caught() {
        let w = [1.0, 2.0];
        let mut p = recorded(&w);
        p.specs.push(TensorSpec::new("z", Shape::of(&[3]), DType::F32));
        let z = TensorId::at(3);
        p.nodes.push(pass::Fresh::from(1).op(Some(0), OpKind::Neg, Attrs::new(), vec![TensorId::at(2)], vec![z]));
        p.outputs = vec![z];
        let (node, _) = broke(&p);
        assert!(node.starts_with("node 0 (neg -> 'z'"), "{node}");
    }

    #[test]
    fn dangling_ids_double_definitions_and_undefined_outputs_are_caught() {
        let w = [1.0, 2.0];
        let mut p = recorded(&w);
        p.nodes[0].inputs[1] = TensorId::at(9);
        assert!(broke(&p).1.contains("tensor #9, which does not exist"));

        let mut p = recorded(&w);
        p.nodes[0].outputs[0] = TensorId::at(0); // redefines the input x
        let (node, detail) = broke(&p);
        assert_eq!(node, "node 0 (add -> 'x')");
        assert!(detail.contains("already defined, by a runtime input"), "{detail}");

        let mut p = recorded(&w);
        p.nodes.clear();
        assert_eq!(broke(&p).0, "graph output 0");

        let mut p = recorded(&w);
        p.outputs.clear();
        assert_eq!(broke(&p).0, "the graph outputs");
    }

    #[test]
    fn constants_that_disagree_with_their_tensor_or_share_a_key_are_caught() {
        let three = [1.0, 2.0, 3.0];
        let (node, detail) = broke(&recorded(&three));
        assert_eq!(node, "constant 'w'");
        assert!(detail.contains("3 values") && detail.contains("has 2"), "{detail}");

        let w = [1.0, 2.0];
        let mut p = recorded(&w);
        p.specs[1].dtype = DType::I32;
        p.specs[0].dtype = DType::I32;
        p.specs[2].dtype = DType::I32;
        assert!(broke(&p).1.contains("its values are f32, its tensor is i32"));

        let mut p = recorded(&w);
        p.inputs.clear();
        let x = Constant { tensor: TensorId::at(0), key: "w".into(), data: ConstantData::F32(Lent::Slice(&w)) };
        p.constants.push(x);
        assert!(broke(&p).1.contains("another constant has its key"));
    }
}
