//! Checks on a compiled module's bytes made before IREE sees them: its container and FlatBuffer header (IREE's
//! bytecode verifier reads past the end of some damaged modules), and, for the CPU, whether this machine can run
//! the code it carries (code built for features the CPU lacks stops the process with SIGILL mid-call).
//!
//! A .vmfb is an optional ZIP local-file header (IREE writes one so `unzip` lists the module), a u32 size prefix,
//! a FlatBuffer whose root is `iree.vm.BytecodeModuleDef` (file identifier `IREE`), then external rodata.

use crate::error::IreeError;

/// The FlatBuffer file identifier of `iree.vm.BytecodeModuleDef` (bytecode_module_def.fbs).
const IDENTIFIER: &[u8; 4] = b"IREE";
/// The ZIP local-file header signature and the header's fixed size (the names follow it).
const ZIP_SIGNATURE: &[u8; 4] = b"PK\x03\x04";
const ZIP_HEADER_SIZE: u64 = 30;

/// Element size of each vector field of `BytecodeModuleDef`, by field index; `None` for a scalar or table field.
/// Offsets (tables, strings) are 4 bytes; `function_descriptors` holds 20-byte structs; `bytecode_data` bytes.
const ROOT_FIELDS: [(&str, FieldKind); 16] = [
    ("name", FieldKind::Vector(1)),
    ("version", FieldKind::Scalar(4)),
    ("requirements", FieldKind::Scalar(4)),
    ("attrs", FieldKind::Vector(4)),
    ("types", FieldKind::Vector(4)),
    ("dependencies", FieldKind::Vector(4)),
    ("imported_functions", FieldKind::Vector(4)),
    ("exported_functions", FieldKind::Vector(4)),
    ("function_signatures", FieldKind::Vector(4)),
    ("rodata_segments", FieldKind::Vector(4)),
    ("rwdata_segments", FieldKind::Vector(4)),
    ("module_state", FieldKind::Table),
    ("function_descriptors", FieldKind::Vector(20)),
    ("bytecode_version", FieldKind::Scalar(4)),
    ("bytecode_data", FieldKind::Vector(1)),
    ("debug_database", FieldKind::Table),
];

#[derive(Clone, Copy)]
enum FieldKind {
    /// An inline scalar of this many bytes.
    Scalar(u64),
    /// A u32 offset to a vector (or string) of elements of this many bytes.
    Vector(u64),
    /// A u32 offset to a table.
    Table,
}

/// A little-endian integer of `N` bytes at `at`, or `None` past the end.
fn read<const N: usize>(bytes: &[u8], at: u64) -> Option<[u8; N]> {
    let start = usize::try_from(at).ok()?;
    bytes.get(start..start.checked_add(N)?)?.try_into().ok()
}
fn u16_at(bytes: &[u8], at: u64) -> Option<u64> {
    read::<2>(bytes, at).map(|b| u64::from(u16::from_le_bytes(b)))
}
fn u32_at(bytes: &[u8], at: u64) -> Option<u64> {
    read::<4>(bytes, at).map(|b| u64::from(u32::from_le_bytes(b)))
}

/// Refuses bytes that are not a well-formed module container: what IREE's loader and verifier would otherwise
/// dereference unchecked. Checks the ZIP prefix, the size prefix, the identifier, the root table, its vtable, and
/// that every field the root's vtable lists (and every vector or table it points at) lies inside the FlatBuffer.
pub(crate) fn check_structure(vmfb: &[u8]) -> Result<(), IreeError> {
    check_container(vmfb).map_err(|message| IreeError::NotAModule { what: "the module bytes".into(), message })
}

fn check_container(vmfb: &[u8]) -> Result<(), String> {
    let total = vmfb.len() as u64;
    let mut start = 0u64;
    if vmfb.starts_with(ZIP_SIGNATURE) {
        // IREE skips the local header and its two variable-length names to reach the module.
        let names = u16_at(vmfb, 26).zip(u16_at(vmfb, 28)).map(|(name, extra)| name + extra);
        let Some(names) = names else {
            return Err(format!("it starts as a ZIP file but its {total} bytes end inside the ZIP header"));
        };
        start = ZIP_HEADER_SIZE + names;
    }
    let module = vmfb.get(usize::try_from(start).unwrap_or(usize::MAX)..).unwrap_or(&[]);
    let available = module.len() as u64;
    if available < 16 {
        return Err(format!("{available} bytes after the ZIP header at offset {start}; a module has at least 16"));
    }
    let prefix = u32_at(module, 0).unwrap_or(0);
    if prefix > available - 4 {
        return Err(format!(
            "its FlatBuffer size prefix (offset {start}) says {prefix} bytes but only {} follow: the file is \
             truncated or damaged",
            available - 4
        ));
    }
    let fb = module.get(4..).and_then(|m| m.get(..usize::try_from(prefix).ok()?)).unwrap_or(&[]);
    check_flatbuffer(fb).map_err(|e| format!("its FlatBuffer (at offset {}): {e}", start + 4))
}

/// The root table of a FlatBuffer of `BytecodeModuleDef`.
fn check_flatbuffer(fb: &[u8]) -> Result<(), String> {
    let len = fb.len() as u64;
    if len < 8 {
        return Err(format!("{len} bytes, fewer than its 8-byte header"));
    }
    if fb.get(4..8) != Some(IDENTIFIER.as_slice()) {
        let found = fb.get(4..8).map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        return Err(format!("file identifier {found:?}, not \"IREE\" (an IREE bytecode module's)"));
    }
    let root = u32_at(fb, 0).unwrap_or(u64::MAX);
    let fields = table_fields(fb, root).map_err(|e| format!("root table at {root}: {e}"))?;
    for (index, field_at) in fields.into_iter().enumerate() {
        let (Some(at), Some((name, kind))) = (field_at, ROOT_FIELDS.get(index)) else { continue };
        check_field(fb, at, *kind).map_err(|e| format!("root field {name} at {at}: {e}"))?;
        if *name == "imported_functions" {
            check_imports(fb, at)?;
        }
    }
    Ok(())
}

/// Every imported function is a table with a signature that has a calling convention: IREE's bytecode verifier
/// reads an import's signature without checking it is there (a vector element pointing at another table, a
/// `TypeDef` say, passes the FlatBuffer verifier and crashes it).
fn check_imports(fb: &[u8], field_at: u64) -> Result<(), String> {
    let vector = field_at + u32_at(fb, field_at).unwrap_or(u64::MAX);
    // The vector's extent was checked by check_field: every element offset is inside the buffer.
    let count = u32_at(fb, vector).unwrap_or(0);
    for i in 0..count {
        let bad = |e: String| format!("imported function {i}: {e}");
        let element = vector + 4 + 4 * i;
        let table = element + u32_at(fb, element).unwrap_or(u64::MAX);
        let fields = table_fields(fb, table).map_err(|e| bad(format!("its table at {table}: {e}")))?;
        let field = |index: usize| fields.get(index).copied().flatten();
        let (Some(name), Some(signature)) = (field(0), field(1)) else {
            return Err(bad("it has no name or no signature".into()));
        };
        check_field(fb, name, FieldKind::Vector(1)).map_err(|e| bad(format!("its name: {e}")))?;
        check_field(fb, signature, FieldKind::Table).map_err(|e| bad(format!("its signature: {e}")))?;
        let sig_table = signature + u32_at(fb, signature).unwrap_or(u64::MAX);
        let sig_fields = table_fields(fb, sig_table).map_err(|e| bad(format!("its signature: {e}")))?;
        let Some(convention) = sig_fields.first().copied().flatten() else {
            return Err(bad("its signature has no calling convention".into()));
        };
        check_field(fb, convention, FieldKind::Vector(1)).map_err(|e| bad(format!("its calling convention: {e}")))?;
    }
    Ok(())
}

/// The absolute positions of a table's present fields, in vtable order, after checking the table and its
/// vtable lie inside `fb` (the table's soffset points at its vtable, which lists u16 offsets into the table).
fn table_fields(fb: &[u8], table: u64) -> Result<Vec<Option<u64>>, String> {
    let len = fb.len() as u64;
    let soffset = read::<4>(fb, table).map(i32::from_le_bytes).ok_or("past the end")?;
    let vtable = i64::try_from(table)
        .ok()
        .and_then(|t| t.checked_sub(i64::from(soffset)))
        .and_then(|v| u64::try_from(v).ok())
        .ok_or(format!("its vtable offset {soffset} points before the buffer"))?;
    let (Some(vt_size), Some(table_size)) = (u16_at(fb, vtable), u16_at(fb, vtable + 2)) else {
        return Err(format!("its vtable at {vtable} is past the {len}-byte buffer"));
    };
    if vt_size < 4 || vt_size % 2 != 0 || vtable + vt_size > len {
        return Err(format!("its vtable at {vtable} claims {vt_size} bytes; the buffer holds {len}"));
    }
    if table_size < 4 || table + table_size > len {
        return Err(format!("it claims {table_size} bytes; the buffer holds {len}"));
    }
    let count = (vt_size - 4) / 2;
    // Bounded by the vtable size checked above (at most 32767 fields), not by a claim alone.
    let mut fields = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for i in 0..count {
        let offset = u16_at(fb, vtable + 4 + 2 * i).unwrap_or(0);
        if offset != 0 && offset >= table_size {
            return Err(format!("field {i} at +{offset} lies outside the table's {table_size} bytes"));
        }
        fields.push((offset != 0).then_some(table + offset));
    }
    Ok(fields)
}

/// One field of the root table at `at`: its inline bytes, and what its offset points at, inside `fb`.
fn check_field(fb: &[u8], at: u64, kind: FieldKind) -> Result<(), String> {
    let len = fb.len() as u64;
    let inline = match kind {
        FieldKind::Scalar(size) => size,
        FieldKind::Vector(_) | FieldKind::Table => 4,
    };
    if at + inline > len {
        return Err(format!("{inline} bytes past the {len}-byte buffer"));
    }
    let target = match kind {
        FieldKind::Scalar(_) => return Ok(()),
        FieldKind::Vector(_) | FieldKind::Table => at + u32_at(fb, at).unwrap_or(u64::MAX),
    };
    match kind {
        FieldKind::Vector(element) => {
            let count = u32_at(fb, target).ok_or(format!("its vector at {target} is past the {len}-byte buffer"))?;
            // 2^32 elements of at most 20 bytes: no overflow in u64.
            let end = target + 4 + count * element;
            if end > len {
                return Err(format!("its {count} elements end at {end}, past the {len}-byte buffer"));
            }
            Ok(())
        }
        FieldKind::Table => table_fields(fb, target).map(|_| ()).map_err(|e| format!("its table at {target}: {e}")),
        FieldKind::Scalar(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use super::check_structure;
    use crate::error::IreeError;
    use crate::test_support::{ADD, CPU, compile};
    use crate::{Device, Instance};

    /// Damaged module bytes either fail our check or reach IREE, which must then answer with an error or a module,
    /// never crash the test process.
    fn load_or_refuse(device: &Device, bytes: &[u8], what: &str) -> bool {
        match check_structure(bytes) {
            Err(IreeError::NotAModule { .. }) => false,
            Err(e) => panic!("{what}: {e:?}"),
            Ok(()) => {
                let _ = device.load(bytes, &[]);
                true
            }
        }
    }

    #[test]
    fn a_compiled_module_passes_and_every_truncation_and_header_flip_is_refused_or_survived() {
        let dir = tempfile::tempdir().unwrap();
        let vmfb = compile(dir.path(), "add", ADD, CPU);
        check_structure(&vmfb).unwrap();
        let device = Instance::new().unwrap().device("local-sync", 0).unwrap();
        device.load(&vmfb, &[]).unwrap();
        let mut reached_iree = 0;
        for len in 0..vmfb.len() {
            reached_iree += usize::from(load_or_refuse(&device, &vmfb[..len], &format!("truncated to {len}")));
        }
        // The ZIP header, size prefix, root table, its vtable and the first fields: every bit pattern class.
        for at in 0..vmfb.len().min(512) {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut flipped = vmfb.clone();
                flipped[at] ^= mask;
                reached_iree += usize::from(load_or_refuse(&device, &flipped, &format!("byte {at} ^ {mask:#x}")));
            }
        }
        eprintln!("{reached_iree} damaged modules passed the checks and were refused or loaded by IREE");
    }

    /// A module element of the import vector redirected to a `TypeDef` (byte 877 of the add module, 0x03 → 0x00:
    /// IREE 3.13's verifier dereferences the missing signature, SIGSEGV).
    #[test]
    fn an_import_without_a_signature_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let vmfb = compile(dir.path(), "add", ADD, CPU);
        let fb = 68; // ZIP header (64 bytes) and size prefix
        let root = fb + u32::from_le_bytes(vmfb[fb..fb + 4].try_into().unwrap()) as usize;
        let soffset = i64::from(i32::from_le_bytes(vmfb[root..root + 4].try_into().unwrap()));
        let vtable = usize::try_from(root as i64 - soffset).unwrap();
        let field = u16::from_le_bytes(vmfb[vtable + 4 + 2 * 6..vtable + 6 + 2 * 6].try_into().unwrap()) as usize;
        let imports =
            root + field + u32::from_le_bytes(vmfb[root + field..root + field + 4].try_into().unwrap()) as usize;
        let types_field = u16::from_le_bytes(vmfb[vtable + 4 + 2 * 4..vtable + 6 + 2 * 4].try_into().unwrap()) as usize;
        let types = root
            + types_field
            + u32::from_le_bytes(vmfb[root + types_field..root + types_field + 4].try_into().unwrap()) as usize;
        // Point import 0 at a type's table (offsets only point forward: the last type's).
        let count = u32::from_le_bytes(vmfb[types..types + 4].try_into().unwrap()) as usize;
        let last = types + 4 + 4 * (count - 1);
        let type_table = last + u32::from_le_bytes(vmfb[last..last + 4].try_into().unwrap()) as usize;
        let mut bad = vmfb.clone();
        let element = imports + 4;
        bad[element..element + 4].copy_from_slice(&u32::try_from(type_table - element).unwrap().to_le_bytes());
        let e = check_structure(&bad).unwrap_err();
        assert!(e.to_string().contains("imported function 0: it has no name or no signature"), "{e}");
    }

    #[test]
    fn the_container_errors_say_what_is_wrong() {
        let text = |bytes: &[u8]| check_structure(bytes).unwrap_err().to_string();
        assert!(text(b"").contains("0 bytes after the ZIP header"), "{}", text(b""));
        assert!(text(b"PK\x03\x04\x00").contains("end inside the ZIP header"));
        let mut fb = vec![0u8; 24];
        fb[0] = 20; // size prefix: the 20 bytes that follow
        fb[8..12].copy_from_slice(b"NOPE");
        assert!(text(&fb).contains("file identifier \"NOPE\""), "{}", text(&fb));
        fb[8..12].copy_from_slice(b"IREE");
        fb[4] = 200; // root table offset past the end
        assert!(text(&fb).contains("root table at 200: past the end"), "{}", text(&fb));
        fb[0] = 200;
        assert!(text(&fb).contains("says 200 bytes but only 20 follow"), "{}", text(&fb));
        let e = check_structure(&fb).unwrap_err();
        assert!(e.to_string().contains("is not an IREE compiled module"), "{e}");
    }
}

/// Reports what [`check_structure`] says of every file in `$TAPEOUT_VMFB_PROBE` (a directory or one file), and
/// with `$TAPEOUT_VMFB_PROBE_LOAD` set, what loading each that passes on `local-sync` does (a crash ends the
/// process: give one file). The fuzzing aid behind docs/reliability.md's list of modules IREE itself crashes on.
#[cfg(test)]
#[test]
#[ignore = "a tool: run with TAPEOUT_VMFB_PROBE=<dir or file> -- --ignored --nocapture"]
fn probe() {
    let Some(target) = std::env::var_os("TAPEOUT_VMFB_PROBE").map(std::path::PathBuf::from) else { return };
    let mut names: Vec<_> = std::fs::read_dir(&target).into_iter().flatten().flatten().map(|e| e.path()).collect();
    if target.is_file() {
        names.push(target);
    }
    names.sort();
    let load = std::env::var_os("TAPEOUT_VMFB_PROBE_LOAD").is_some();
    for path in names {
        let bytes = std::fs::read(&path).unwrap_or_default();
        let mut verdict = check_structure(&bytes).map_or_else(|e| e.to_string(), |()| "passes".into());
        if load && verdict == "passes" {
            let device = crate::Instance::new().and_then(|i| i.device("local-sync", 0));
            let loaded = device.and_then(|d| d.load(&bytes, &[]));
            verdict = loaded.map_or_else(|e| format!("passes; IREE: {e}"), |_| "passes; IREE loads it".into());
        }
        eprintln!("{}: {verdict}", path.display());
    }
}
