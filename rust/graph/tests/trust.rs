//! A graph file is untrusted: its `data.file` entries may only read files in its own directory tree, unless
//! the caller says otherwise (docs/reliability.md, "Trust boundaries").
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use tapeout_graph::Storage;
use tapeout_graph::io::{FileAccess, GraphFile, IoError, WeightSet};

/// A graph whose tensor `secret` (module path `model.secret`) takes its 4 bytes from `file`.
fn graph(dir: &Path, file: &str, mapped: bool) -> GraphFile {
    let json = serde_json::json!({
        "name": "g",
        "tensors": [
            {"name": "secret", "shape": [4], "dtype": "u8", "path": "model.secret",
             "data": {"file": file, "mapped": mapped}},
            {"name": "y", "shape": [4], "dtype": "u8"},
        ],
        "nodes": [{"op": "neg", "inputs": ["secret"], "outputs": ["y"]}],
        "outputs": ["y"],
    });
    let path = dir.join("g.json");
    std::fs::write(&path, json.to_string()).unwrap();
    GraphFile::load(&path).unwrap()
}

/// The graph dir `<tmp>/models/m` and a file outside it, `<tmp>/private/key` (bytes "KEY!").
fn layout() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("models/m");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(tmp.path().join("private")).unwrap();
    std::fs::write(tmp.path().join("private/key"), b"KEY!").unwrap();
    std::fs::write(dir.join("w.bin"), b"ok!!").unwrap();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/w.bin"), b"sub!").unwrap();
    (tmp, dir)
}

fn refused(g: &GraphFile, needle: &str) -> String {
    let e = WeightSet::open(g, None).map(|_| ()).expect_err("the graph may not read that file");
    assert!(matches!(e, IoError::OutsideGraphDir { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("tensor 'model.secret'") && msg.contains(needle), "{msg}");
    msg
}

#[test]
fn an_absolute_path_is_refused_naming_tensor_and_path() {
    let (tmp, dir) = layout();
    let key = tmp.path().join("private/key");
    let msg = refused(&graph(&dir, key.to_str().unwrap(), false), "an absolute path");
    assert!(msg.contains(&format!("{key:?}")), "{msg}");
}

#[test]
fn a_dotdot_escape_is_refused_but_dotdot_within_the_tree_is_fine() {
    let (_tmp, dir) = layout();
    refused(&graph(&dir, "../../private/key", false), "\"../../private/key\"");
    refused(&graph(&dir, "sub/../../../private/key", false), "leaves the graph's directory");
    let ok = graph(&dir, "sub/../w.bin", false);
    let weights = WeightSet::open(&ok, None).unwrap();
    ok.to_trace(&weights).unwrap();
}

#[test]
fn a_symlink_inside_pointing_outside_is_refused_and_one_pointing_inside_is_fine() {
    let (tmp, dir) = layout();
    std::os::unix::fs::symlink(tmp.path().join("private/key"), dir.join("innocent.bin")).unwrap();
    refused(&graph(&dir, "innocent.bin", false), "resolves (through a symlink)");
    std::os::unix::fs::symlink(dir.join("sub/w.bin"), dir.join("alias.bin")).unwrap();
    let ok = graph(&dir, "alias.bin", false);
    WeightSet::open(&ok, None).unwrap();
}

#[test]
fn mapped_regions_are_held_to_the_directory_too() {
    let (_tmp, dir) = layout();
    let g = graph(&dir, "/etc/hostname", true);
    let weights = WeightSet::open(&g, None).unwrap(); // a mapped region is never opened by tapeout
    let e = g.to_trace(&weights).map(|_| ()).expect_err("refused").to_string();
    assert!(e.contains("tensor 'model.secret'") && e.contains("absolute path"), "{e}");
}

#[test]
fn the_caller_can_trust_a_graph_explicitly() {
    let (_tmp, dir) = layout();
    let g = graph(&dir, "../../private/key", false).with_file_access(FileAccess::Anywhere);
    let weights = WeightSet::open(&g, None).unwrap();
    g.to_trace(&weights).unwrap();
}

#[test]
fn fifos_and_devices_are_refused_without_blocking() {
    let (_tmp, dir) = layout();
    let fifo = dir.join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().map(|s| s.success()).unwrap_or(false);
    if made {
        let e = WeightSet::open(&graph(&dir, "pipe", false), None).map(|_| ()).expect_err("refused").to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
    let trusted = graph(&dir, "/dev/zero", false).with_file_access(FileAccess::Anywhere);
    let e = WeightSet::open(&trusted, None).map(|_| ()).expect_err("refused").to_string();
    assert!(e.contains("not a regular file"), "{e}");
}

/// A symlink flipped between a file inside and one outside while the graph is opened again and again: every
/// open either reads the inside file or is refused; the outside bytes are never read.
#[test]
fn a_symlink_swapped_during_the_check_never_lets_the_outside_file_in() {
    let (tmp, dir) = layout();
    let link = dir.join("flip.bin");
    let (inside, outside) = (dir.join("w.bin"), tmp.path().join("private/key"));
    std::os::unix::fs::symlink(&inside, &link).unwrap();
    let g = graph(&dir, "flip.bin", false);
    let stop = std::sync::atomic::AtomicBool::new(false);
    /// Stops the swapping thread however the loop below ends (a failed assertion included).
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let (mut read_inside, mut refused_n) = (0u32, 0u32);
    std::thread::scope(|s| {
        let _stop = Stop(&stop);
        s.spawn(|| {
            let tmp_link = dir.join("flip.tmp");
            let mut to_outside = true;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_file(&tmp_link);
                let target = if to_outside { &outside } else { &inside };
                std::os::unix::fs::symlink(target, &tmp_link).unwrap();
                std::fs::rename(&tmp_link, &link).unwrap(); // atomic swap
                to_outside = !to_outside;
            }
        });
        for _ in 0..3000 {
            match WeightSet::open(&g, None) {
                Ok(w) => {
                    let t = g.to_trace(&w).unwrap();
                    let Storage::Dense(lent) = &t.tensors()[0].storage else { panic!("dense bytes expected") };
                    assert_eq!(lent.as_slice(), Some(&b"ok!!"[..]), "only the inside file's bytes are ever read");
                    read_inside += 1;
                }
                Err(IoError::OutsideGraphDir { .. } | IoError::Io { .. }) => refused_n += 1,
                Err(e) => panic!("{e}"),
            }
        }
    });
    assert!(read_inside > 0 && refused_n > 0, "the race was exercised: {read_inside} inside, {refused_n} refused");
}

/// The export copies a weight file to file from the handle opened (and checked) here: pointing the name at a file
/// outside the tree afterwards changes nothing, and bytes that are not from one of the set's files have no region.
#[test]
fn the_kernel_copy_reads_the_checked_file_not_the_name_swapped_later() {
    use std::os::unix::fs::FileExt;
    let (tmp, dir) = layout();
    let g = graph(&dir, "w.bin", false);
    let weights = WeightSet::open(&g, None).unwrap();
    std::fs::remove_file(dir.join("w.bin")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("private/key"), dir.join("w.bin")).unwrap();
    let t = g.to_trace(&weights).unwrap();
    let Storage::Dense(lent) = &t.tensors()[0].storage else { panic!("dense bytes expected") };
    let bytes = lent.as_slice().unwrap();
    let (file, path, offset) = weights.file_region(bytes).expect("the bytes are a region of w.bin");
    assert_eq!((path.file_name().and_then(|n| n.to_str()), offset), (Some("w.bin"), 0));
    let mut got = [0u8; 4];
    file.read_exact_at(&mut got, offset).unwrap();
    assert_eq!(&got, b"ok!!", "the handle opened at the check, not the swapped name");
    assert!(weights.file_region(b"ok!!").is_none(), "bytes outside every mapping have no file");
    assert!(weights.file_region(&bytes[..0]).is_none());
}
