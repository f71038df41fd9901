//! The `tapeout` binary as a user runs it: exit codes, ordering, messages.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;
use std::process::{Command, Output};

fn tapeout(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tapeout")).args(args).current_dir(dir).output().expect("run tapeout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn pack_keeps_argument_order_across_data_and_splats() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.bin"), [1u8; 8]).unwrap();
    std::fs::write(dir.path().join("b.bin"), [2u8; 4]).unwrap();
    let o = tapeout(
        &["pack", "-o", "p.irpa", "--splat", "s0=f32:1:2", "a=a.bin", "--splat", "s1=i8:3:5", "b=b.bin"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let a = tapeout::irpa::Archive::open(dir.path().join("p.irpa")).unwrap();
    let keys: Vec<_> = a.entries().map(|e| e.key.to_owned()).collect();
    assert_eq!(keys, ["s0", "a", "s1", "b"]);
}

#[test]
fn usage_errors_exit_2_and_input_errors_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(tapeout(&["pack"], dir.path()).status.code(), Some(2));
    assert_eq!(tapeout(&["frobnicate"], dir.path()).status.code(), Some(2));

    let o = tapeout(&["verify", "missing.irpa"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("tapeout: error: cannot read missing.irpa"), "{}", stderr(&o));

    let o = tapeout(&["pack", "-o", "p.irpa", "novalue"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not KEY=VALUE"), "{}", stderr(&o));

    std::fs::write(dir.path().join("a.bin"), [1u8; 4]).unwrap();
    let o = tapeout(&["pack", "-o", "p.irpa", "k=a.bin", "k=a.bin"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("duplicate parameter key \"k\""), "{}", stderr(&o));
    assert!(!dir.path().join("p.irpa").exists(), "no archive after a failed pack");

    let o = tapeout(&["pack", "-o", "p.irpa", "k=a.bin", "--meta", "other=a.bin"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--meta names key \"other\""), "{}", stderr(&o));
}

#[test]
fn verify_and_extract_report_bad_archives_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("junk.irpa"), vec![0u8; 4096]).unwrap();
    let o = tapeout(&["verify", "junk.irpa"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("IRPA file magic missing or invalid 00000000"), "{}", stderr(&o));

    std::fs::write(dir.path().join("a.bin"), [5u8; 4]).unwrap();
    assert!(tapeout(&["pack", "-o", "p.irpa", "--splat", "s=f16:1:3", "a=a.bin"], dir.path()).status.success());
    let o = tapeout(&["extract", "p.irpa", "nope", "-o", "x.bin"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no parameter with key \"nope\""), "{}", stderr(&o));
    let o = tapeout(&["extract", "p.irpa", "s", "-o", "s.bin"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.path().join("s.bin")).unwrap(), [0x00, 0x3c].repeat(3));
}

fn graphs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/graphs")
}

/// The ops and attributes only passes write are not recordable: a graph file naming one (a row gate, a banded
/// matmul) is refused naming the node and what to record instead, and nothing is written; the emitter's own tests
/// pass a hidden flag.
#[test]
fn export_refuses_what_only_passes_write() {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs();
    for (graph, what) in [("row_count_ops", "op 'pad_rows'"), ("banded_rows", "attribute 'banded' of op 'matmul'")] {
        let (json, st) = (g.join(format!("{graph}.json")), g.join(format!("{graph}.safetensors")));
        let (json, st) = (json.display().to_string(), st.display().to_string());
        let o = tapeout(&["export", &json, "--weights", &st, "-o", "out"], dir.path());
        assert_eq!(o.status.code(), Some(1), "{graph}");
        let e = stderr(&o);
        assert!(e.contains(what) && e.contains("written by tapeout's own passes") && e.contains("--target"), "{e}");
        assert!(!dir.path().join(format!("out/{graph}.mlir")).exists());
        let o = tapeout(&["export", &json, "--weights", &st, "-o", "out", "--accept-pass-ops"], dir.path());
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let help = stdout(&tapeout(&["export", "--help"], dir.path()));
    assert!(!help.contains("accept-pass-ops") && help.contains("--target"), "{help}");
}

#[test]
fn export_refuses_packed_weights_with_the_remedy_and_dequantizes_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs();
    let (json, st) = (g.join("mlp.json"), g.join("mlp.safetensors"));
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v = vec!["export".to_owned(), json.display().to_string(), "--weights".into(), st.display().to_string()];
        v.extend(["-o".to_owned(), "out".into()]);
        v.extend(extra.iter().map(|s| (*s).to_owned()));
        v
    };
    let run = |a: Vec<String>| tapeout(&a.iter().map(String::as_str).collect::<Vec<_>>(), dir.path());
    let o = run(args(&[]));
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("'model.fc1.weight'") && e.contains("Q8_0") && e.contains("pass --packed dequantize"), "{e}");
    assert!(!e.contains("PackedConstantHandling") && !e.contains("DEQUANTIZE"), "no other front end's wording: {e}");
    assert!(!dir.path().join("out/mlp.mlir").exists() && !dir.path().join("out/mlp.irpa").exists());

    let o = run(args(&["--packed", "dequantize"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let a = tapeout::irpa::Archive::open(dir.path().join("out/mlp.irpa")).unwrap();
    let fc1 = a.get("model.fc1.weight").unwrap();
    assert_eq!(fc1.byte_len(), 16 * 64 * 4, "dequantized to f32");
    let md = std::str::from_utf8(fc1.metadata).unwrap();
    assert!(md.contains("\"from\":\"Q8_0\"") && md.contains("\"transposed_from\":[16,64]"), "{md}");
    let text = std::fs::read_to_string(dir.path().join("out/mlp.mlir")).unwrap();
    // Used only transposed, by a matmul: dequantized and written in bands of 8 output rows, [out / 8, in, 8],
    // contracted as stored by one `linalg.generic`.
    assert!(text.contains("#flow.parameter.named<\"model\"::\"model.fc1.weight\"> : tensor<2x64x8xf32>"), "{text}");

    // Codes in row bands only mean something for weights kept packed in the layout chosen for use: asked for
    // otherwise, a usage error that says what to pass, and nothing written.
    for extra in [
        &["--packed-codes", "row-bands"][..],
        &["--packed", "keep", "--layout", "as-held", "--packed-codes", "row-bands"],
    ] {
        let mut a = vec!["export".to_owned(), json.display().to_string(), "--weights".into(), st.display().to_string()];
        a.extend(["-o", "bands"].into_iter().chain(extra.iter().copied()).map(str::to_owned));
        let o = run(a);
        assert_eq!(o.status.code(), Some(1), "{extra:?}");
        assert!(stderr(&o).contains("pass it with --packed keep and without --layout as-held"), "{}", stderr(&o));
        assert!(!dir.path().join("bands").exists(), "{extra:?}");
    }
}

/// A safetensors file at `path` holding one U8 tensor `q` of `bytes`.
fn u8_safetensors(path: &Path, bytes: &[u8]) {
    let header = format!(r#"{{"q":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#, n = bytes.len());
    let mut h = header.into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend(h);
    file.extend(bytes);
    std::fs::write(path, file).unwrap();
}

#[test]
fn codes_in_row_bands_reach_the_archive_and_a_weight_gathered_elsewhere_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Q8_0 W [64, 32]: 64 blocks (scale 1.0, then 32 codes), two bands of 32 rows.
    let block: Vec<u8> = [0x00, 0x3C].into_iter().chain((0..32u8).map(|i| i.wrapping_mul(7))).collect();
    u8_safetensors(&dir.path().join("w.safetensors"), &block.repeat(64));
    let w =
        r#"{"name": "w", "shape": [64, 32], "dtype": "f32", "path": "w", "data": {"tensor": "q", "encoding": "Q8_0"}}"#;
    let head = r#"{"name": "head", "tensors": [{"name": "x", "shape": [1, 32], "dtype": "f32"},
        {"name": "wt", "shape": [32, 64], "dtype": "f32"}, {"name": "y", "shape": [1, 64], "dtype": "f32"}],
        "nodes": [{"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["x", "wt"], "outputs": ["y"]}], "outputs": ["y"]}"#;
    let embed = r#"{"name": "embed", "tensors": [{"name": "ids", "shape": [2], "dtype": "i32"},
        {"name": "e", "shape": [2, 32], "dtype": "f32"}],
        "nodes": [{"op": "gather", "inputs": ["w", "ids"], "outputs": ["e"]}], "outputs": ["e"]}"#;
    let export = |functions: &[&str], out: &str| {
        let g = format!(r#"{{"name": "lm", "tensors": [{w}], "functions": [{}]}}"#, functions.join(", "));
        std::fs::write(dir.path().join("g.json"), g).unwrap();
        let args =
            ["export", "g.json", "--weights", "w.safetensors", "-o", out, "--packed", "keep", "--inline-below", "0"];
        tapeout(&[&args[..], &["--packed-codes", "row-bands"]].concat(), dir.path())
    };
    let o = export(&[head], "one");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(dir.path().join("one/lm.mlir")).unwrap();
    assert!(text.contains(r#"#flow.parameter.named<"model"::"w.qs"> : tensor<2x1x32x32xi8>"#), "{text}");
    let a = tapeout::irpa::Archive::open(dir.path().join("one/lm.irpa")).unwrap();
    let md = std::str::from_utf8(a.get("w.qs").unwrap().metadata).unwrap();
    assert!(md.contains(r#""shape":[2,1,32,32]"#), "{md}");
    // One function multiplies the weight, the other gathers its rows: the two layouts cannot share one key.
    let o = export(&[head, embed], "two");
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("'w.qs' are in row bands in function 'head' and in block rows in function 'embed'"), "{e}");
    assert!(e.contains("; keep the codes in block rows: export without --packed-codes row-bands"), "{e}");
    assert!(!dir.path().join("two/lm.mlir").exists());
}

#[test]
fn export_reports_bad_graphs_as_one_sentence() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("g.json"), r#"{"name":"g","tensors":[{"name":"x","shape":[2],"dtype":"f32"}],"nodes":[{"op":"neg","inputs":["x"],"outputs":["x2"]}],"outputs":["x"]}"#).unwrap();
    let o = tapeout(&["export", "g.json", "-o", "out"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("refers to unknown tensor \"x2\""), "{}", stderr(&o));
    std::fs::write(dir.path().join("g.json"), r#"{"name":"g","tensors":[{"name":"x","shape":[2],"dtype":"f32"},{"name":"y","shape":[2],"dtype":"f32"}],"nodes":[{"op":"warp","inputs":["x"],"outputs":["y"]}],"outputs":["y"]}"#).unwrap();
    let o = tapeout(&["export", "g.json", "-o", "out"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unknown op 'warp'"), "{}", stderr(&o));
}

#[test]
fn a_graph_cannot_read_files_outside_its_directory_unless_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let (models, private) = (tmp.path().join("models"), tmp.path().join("private"));
    std::fs::create_dir_all(&models).unwrap();
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("id_ed25519"), b"PRIVATE KEY BYTES").unwrap();
    let key = private.join("id_ed25519");
    for file in [key.to_str().unwrap(), "../private/id_ed25519"] {
        let graph = serde_json::json!({"name": "g", "tensors": [
            {"name": "k", "shape": [17], "dtype": "u8", "path": "model.k", "data": {"file": file}},
            {"name": "y", "shape": [17], "dtype": "u8"}],
            "nodes": [{"op": "neg", "inputs": ["k"], "outputs": ["y"]}], "outputs": ["y"]});
        std::fs::write(models.join("g.json"), graph.to_string()).unwrap();
        let o = tapeout(&["export", "models/g.json", "-o", "out", "--inline-all"], tmp.path());
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("tensor 'model.k'") && e.contains(&format!("{file:?}")), "{e}");
        assert!(e.contains("pass --allow-files-outside-graph-dir"), "the remedy is the CLI's flag: {e}");
        assert!(!tmp.path().join("out").exists(), "nothing is written");

        let o = tapeout(
            &["export", "models/g.json", "-o", "out", "--inline-all", "--allow-files-outside-graph-dir"],
            tmp.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let text = std::fs::read_to_string(tmp.path().join("out/g.mlir")).unwrap();
        assert!(text.contains("505249564154"), "the trusted graph read the file (\"PRIVAT\" in hex)");
        std::fs::remove_dir_all(tmp.path().join("out")).unwrap();
    }
}

/// Two separate processes (each with its own hash seeds, allocation addresses and thread timing) write the same
/// bytes: the module text and the archive, for a dense graph and for packed weights kept as planes.
#[test]
fn export_is_byte_identical_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs();
    for (name, extra) in [("transformer", &[][..]), ("mlp", &["--packed", "keep"][..])] {
        let (json, st) = (g.join(format!("{name}.json")), g.join(format!("{name}.safetensors")));
        let outputs: Vec<(Vec<u8>, Vec<u8>)> = ["one", "two"]
            .iter()
            .map(|out| {
                let mut args = vec!["export", json.to_str().unwrap(), "--weights", st.to_str().unwrap(), "-o", out];
                args.extend(extra);
                let o = tapeout(&args, dir.path());
                assert!(o.status.success(), "{name}: {}", stderr(&o));
                let read = |ext: &str| std::fs::read(dir.path().join(out).join(format!("{name}.{ext}"))).unwrap();
                (read("mlir"), read("irpa"))
            })
            .collect();
        assert!(!outputs[0].0.is_empty() && outputs[0].1.len() >= 4096, "{name}: something was written");
        assert!(outputs[0].0 == outputs[1].0, "{name}: the two processes wrote different module text");
        assert!(outputs[0].1 == outputs[1].1, "{name}: the two processes wrote different archives");
    }
}

#[test]
fn export_writes_the_signature_beside_the_module_in_declared_order() {
    let dir = tempfile::tempdir().unwrap();
    // Declared `tokens, positions`; the first node reads `positions`.
    let graph = r#"{"format":"tapeout-graph/1","name":"sig","tensors":[
        {"name":"tokens","shape":["?",4],"dtype":"f32"},
        {"name":"positions","shape":["?",4],"dtype":"i32"},
        {"name":"p","shape":["?",4],"dtype":"f32"},
        {"name":"y","shape":["?",4],"dtype":"f32"}],
      "nodes":[{"op":"convert","inputs":["positions"],"outputs":["p"],"attrs":{}},
               {"op":"add","inputs":["p","tokens"],"outputs":["y"],"attrs":{}}],
      "outputs":["y","p"]}"#;
    std::fs::write(dir.path().join("sig.json"), graph).unwrap();
    let o = tapeout(&["export", "sig.json", "-o", "out"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("sig.signature.json"), "the CLI says it wrote it");
    let text = std::fs::read_to_string(dir.path().join("out/sig.signature.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let expected = serde_json::json!({
        "format": "tapeout-signature/1", "module": "sig",
        "functions": [{"name": "main",
            // `add(p, tokens)` ties the two arguments' `?` dims: one run-time extent, class d0.
            "arguments": [{"name": "tokens", "dtype": "f32", "shape": ["?", 4], "dims": ["d0", 4]},
                          {"name": "positions", "dtype": "i32", "shape": ["?", 4], "dims": ["d0", 4]}],
            "results": [{"name": "y", "dtype": "f32", "shape": ["?", 4]},
                        {"name": "p", "dtype": "f32", "shape": ["?", 4]}]}]});
    assert_eq!(v, expected);
    // The module's own argument list agrees.
    let mlir = std::fs::read_to_string(dir.path().join("out/sig.mlir")).unwrap();
    let (t, p) = (mlir.find("tapeout.name = \"tokens\"").unwrap(), mlir.find("tapeout.name = \"positions\"").unwrap());
    assert!(t < p, "{mlir}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp") || n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "no temporary files left: {leftovers:?}");
}

#[test]
fn dump_shows_each_entrys_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let g = graphs();
    let (json, st) = (g.join("mlp.json"), g.join("mlp.safetensors"));
    let (json, st) = (json.display().to_string(), st.display().to_string());
    let o = tapeout(&["export", &json, "--weights", &st, "-o", "out", "--packed", "dequantize"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(dir.path().join("a.bin"), [1u8; 4]).unwrap();
    std::fs::write(dir.path().join("m.txt"), "hand-written").unwrap();
    assert!(tapeout(&["pack", "-o", "p.irpa", "a=a.bin", "--meta", "a=m.txt"], dir.path()).status.success());

    let o = tapeout(&["dump", "out/mlp.irpa"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let row = text.lines().find(|l| l.contains("`model.fc1.weight`")).unwrap();
    assert!(row.ends_with("| f32 [2, 64, 8] from=Q8_0 transposed_from=[16,64]"), "{text}");
    let o = tapeout(&["dump", "p.irpa"], dir.path());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("`a` | hand-written"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Metadata that is not UTF-8: its size in the table, hex in the JSON.
    std::fs::write(dir.path().join("m.bin"), [0xffu8, 0xfe, 0x00]).unwrap();
    assert!(tapeout(&["pack", "-o", "b.irpa", "a=a.bin", "--meta", "a=m.bin"], dir.path()).status.success());
    let o = tapeout(&["dump", "b.irpa"], dir.path());
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(table.contains("`a` | 3 bytes (binary)"), "{table}");
    let o = tapeout(&["dump", "--json", "b.irpa"], dir.path());
    let row: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    assert_eq!(row["metadata"], "0xfffe00", "{row}");

    let o = tapeout(&["dump", "--json", "out/mlp.irpa"], dir.path());
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let fc1 = rows.iter().find(|r| r["key"] == "model.fc1.weight").unwrap();
    assert_eq!(fc1["metadata"]["dtype"], "f32");
    assert_eq!(fc1["metadata"]["shape"], serde_json::json!([2, 64, 8]));
    assert_eq!(fc1["metadata"]["from"], "Q8_0");
    assert!(fc1["metadata_length"].as_u64().unwrap() > 0);
}
