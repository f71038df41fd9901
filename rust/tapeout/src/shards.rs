//! An archive split over several files (`--max-archive-bytes`): their names, the JSON index that maps each key
//! to its file, the `--parameters` flags IREE needs to load them together, and reading the set back.
//!
//! IREE 3.13 binds one scope to several files when `--parameters=SCOPE=FILE` is repeated (`iree-run-module`,
//! `iree-benchmark-module`), or when one `ParameterIndex` loads each file (the Python runtime); a key is looked up
//! across all of them. The files of a set are named `<stem>-00001-of-0000K.irpa`; the index, modelled on
//! Hugging Face's `model.safetensors.index.json`, is `<stem>.irpa.index.json`:
//!
//! ```json
//! {"format": "tapeout-irpa-index/1", "scope": "model", "total_size": 123,
//!  "files": ["m-00001-of-00002.irpa", "m-00002-of-00002.irpa"],
//!  "weight_map": {"model.embed.weight": "m-00001-of-00002.irpa", "...": "..."}}
//! ```
//!
//! File names in the index are relative to the index's directory.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use tapeout_irpa::{Archive, ArchiveWriter, Entry, Progress, WriteSummary};

use crate::error::{Error, Result};

/// The `format` of an index file.
pub const INDEX_FORMAT: &str = "tapeout-irpa-index/1";

/// The file name of archive `k` (from 1) of `n` for `stem`: `<stem>-0000k-of-0000n.irpa`.
#[must_use]
pub fn shard_file_name(stem: &str, k: usize, n: usize) -> String {
    format!("{stem}-{k:05}-of-{n:05}.irpa")
}

/// The file name of the index of a set: `<stem>.irpa.index.json`.
#[must_use]
pub fn index_file_name(stem: &str) -> String {
    format!("{stem}.irpa.index.json")
}

/// The archives an export wrote: one `<stem>.irpa`, or a set of shards and its index.
#[derive(Debug, Clone)]
pub struct ArchiveFiles {
    /// Each archive, in order.
    pub archives: Vec<WriteSummary>,
    /// The index of a sharded set (`None` for one archive).
    pub index: Option<PathBuf>,
}

impl ArchiveFiles {
    /// The flags that give IREE's tools every archive under `scope`: `--parameters=SCOPE=FILE`, one per file.
    #[must_use]
    pub fn parameters_flags(&self, scope: &str) -> Vec<String> {
        self.archives.iter().map(|a| format!("--parameters={scope}={}", a.path.display())).collect()
    }

    /// Total size on disk of the archives.
    #[must_use]
    pub fn total_file_size(&self) -> u64 {
        self.archives.iter().map(|a| a.file_size).sum()
    }
}

/// Writes `writer` as `<dir>/<stem>.irpa`, or, with `max_archive_bytes`, as many archives as the limit needs
/// (`<stem>-0000k-of-0000n.irpa`, each at most the limit unless one entry alone exceeds it) plus their index.
/// One archive that fits is written under the plain name. Each file is written atomically; outputs of an earlier
/// export of the same stem in the other form, or with another shard count, are removed afterwards so that the
/// directory holds exactly one consistent set.
pub(crate) fn write(
    writer: ArchiveWriter<'_>,
    max_archive_bytes: Option<u64>,
    dir: &Path,
    stem: &str,
    scope: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<ArchiveFiles> {
    let mut shards = match max_archive_bytes {
        Some(max) => writer.split(max)?,
        None => vec![writer],
    };
    if shards.len() <= 1 {
        #[allow(clippy::expect_used, reason = "split returns at least one archive, an empty writer as one")]
        let only = shards.pop().expect("split returns at least one archive");
        let summary = only.write_with_progress(dir.join(format!("{stem}.irpa")), progress)?;
        remove_stale(dir, stem, None)?;
        return Ok(ArchiveFiles { archives: vec![summary], index: None });
    }
    let n = shards.len();
    let mut sizes = Vec::with_capacity(n);
    for s in &shards {
        sizes.push(s.layout()?.storage_segment.length);
    }
    let total: u64 = sizes.iter().sum();
    let mut done = 0u64;
    let mut archives = Vec::with_capacity(n);
    let mut weight_map = BTreeMap::new();
    let mut files = Vec::with_capacity(n);
    for (k, (shard, size)) in shards.into_iter().zip(sizes).enumerate() {
        let name = shard_file_name(stem, k + 1, n);
        let keys: Vec<String> = shard.keys().map(str::to_owned).collect();
        let summary = shard.write_with_progress(dir.join(&name), &mut |p| {
            progress(Progress { written: done + p.written, total });
        })?;
        done += size;
        for key in keys {
            weight_map.insert(key, name.clone());
        }
        files.push(name);
        archives.push(summary);
    }
    let index = serde_json::json!({
        "format": INDEX_FORMAT,
        "scope": scope,
        "total_size": archives.iter().map(|a| a.file_size).sum::<u64>(),
        "files": files,
        "weight_map": weight_map,
    });
    let index_path = dir.join(index_file_name(stem));
    let text = serde_json::to_vec_pretty(&index)
        .map_err(|e| Error::Write { path: index_path.clone(), source: std::io::Error::other(e) })?;
    tapeout_irpa::write_atomically(&index_path, |f| std::io::Write::write_all(f, &text))?;
    remove_stale(dir, stem, Some(n))?;
    Ok(ArchiveFiles { archives, index: Some(index_path) })
}

/// Removes `<stem>.irpa` (when `kept` is a shard count), shards of another count, and a stale index.
fn remove_stale(dir: &Path, stem: &str, kept: Option<usize>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Write { path: dir.to_path_buf(), source })?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale = if name == format!("{stem}.irpa") {
            kept.is_some()
        } else if name == index_file_name(stem) {
            kept.is_none()
        } else if let Some(count) = shard_count(stem, name) {
            Some(count) != kept
        } else {
            false
        };
        if stale {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|source| Error::Write { path, source })?;
        }
    }
    Ok(())
}

/// `n` when `name` is `<stem>-KKKKK-of-NNNNN.irpa`.
fn shard_count(stem: &str, name: &str) -> Option<usize> {
    let rest = name.strip_prefix(stem)?.strip_prefix('-')?.strip_suffix(".irpa")?;
    let (k, n) = rest.split_once("-of-")?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    (digits(k) && digits(n)).then(|| n.parse().ok()).flatten()
}

/// Archives opened together: one `.irpa`, several, or the index of a set. Keys are unique across the set.
pub struct ArchiveSet {
    archives: Vec<(PathBuf, Archive)>,
    where_is: HashMap<String, usize>,
}

impl ArchiveSet {
    /// Opens `paths`: archives, or a single `*.json` index of a set (every file it lists must be there, and hold
    /// exactly the keys the index maps to it).
    ///
    /// # Errors
    /// An archive's own error, or [`Error::ArchiveSet`] naming the file and what is inconsistent.
    pub fn open(paths: &[PathBuf]) -> Result<Self> {
        let (files, index) = match paths {
            [one] if one.extension().is_some_and(|e| e == "json") => {
                let (files, map) = read_index(one)?;
                (files, Some((one.clone(), map)))
            }
            _ => (paths.to_vec(), None),
        };
        let mut archives = Vec::with_capacity(files.len());
        let mut where_is: HashMap<String, usize> = HashMap::new();
        for (i, path) in files.into_iter().enumerate() {
            let archive = Archive::open(&path)?;
            for e in archive.entries() {
                // Within one archive the reader has its own rule; across archives a key may live in one only.
                if let Some(&first) = where_is.get(e.key).filter(|&&first| first != i) {
                    #[allow(clippy::expect_used, reason = "where_is maps keys to archives pushed in earlier rounds")]
                    let (first, _): &(PathBuf, Archive) =
                        archives.get(first).expect("where_is names only archives already opened");
                    return Err(Error::ArchiveSet {
                        path: path.clone(),
                        problem: format!(
                            "key {:?} is also in {}; IREE would serve the first, so a set must hold each key once",
                            e.key,
                            first.display()
                        ),
                    });
                }
                where_is.entry(e.key.to_owned()).or_insert(i);
            }
            archives.push((path, archive));
        }
        let set = ArchiveSet { archives, where_is };
        if let Some((index_path, map)) = index {
            set.check_index(&index_path, &map)?;
        }
        Ok(set)
    }

    fn check_index(&self, index_path: &Path, map: &BTreeMap<String, PathBuf>) -> Result<()> {
        let bad = |problem: String| Error::ArchiveSet { path: index_path.to_path_buf(), problem };
        for (key, file) in map {
            let Some(&i) = self.where_is.get(key) else {
                return Err(bad(format!("maps key {key:?} to {}, which does not hold it", file.display())));
            };
            if &self.archives[i].0 != file {
                return Err(bad(format!(
                    "maps key {key:?} to {}, but it is in {}",
                    file.display(),
                    self.archives[i].0.display()
                )));
            }
        }
        if let Some(key) = self.where_is.keys().find(|k| !map.contains_key(*k)) {
            let file = &self.archives[self.where_is[key]].0;
            return Err(bad(format!("does not list key {key:?}, which {} holds", file.display())));
        }
        Ok(())
    }

    /// Each archive with its path, in order.
    #[must_use]
    pub fn archives(&self) -> &[(PathBuf, Archive)] {
        &self.archives
    }

    /// The entry under `key`, with the file that holds it.
    ///
    /// # Errors
    /// [`Error::ArchiveSet`] when no archive of the set holds the key.
    pub fn get(&self, key: &str) -> Result<(&Path, Entry<'_>)> {
        // One archive answers in its own words (the reader's error for a missing key).
        let single = (self.archives.len() == 1).then_some(0);
        let Some(i) = self.where_is.get(key).copied().or(single) else {
            // An empty set (opened from no paths) has no file to name.
            let path = self.archives.first().map(|(p, _)| p.clone()).unwrap_or_default();
            let files = self.archives.len();
            return Err(Error::ArchiveSet { path, problem: format!("no archive of the {files} holds key {key:?}") });
        };
        let (path, archive) = &self.archives[i];
        Ok((path, archive.get(key)?))
    }

    /// Number of entries across the set.
    #[must_use]
    pub fn len(&self) -> usize {
        self.where_is.len()
    }

    /// True when no archive holds an entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.where_is.is_empty()
    }
}

/// The files an index lists (resolved against its directory) and its key → file map.
fn read_index(path: &Path) -> Result<(Vec<PathBuf>, BTreeMap<String, PathBuf>)> {
    let bad = |problem: String| Error::ArchiveSet { path: path.to_path_buf(), problem };
    // An index is small: a line per key. Refuse anything that is not.
    const MAX_INDEX_BYTES: u64 = 256 << 20;
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    if meta.len() > MAX_INDEX_BYTES {
        return Err(bad(format!("is {} bytes, more than an index of any archive set", meta.len())));
    }
    let text = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(format!("is not JSON: {e}")))?;
    if v.get("format").and_then(|f| f.as_str()) != Some(INDEX_FORMAT) {
        return Err(bad(format!("is not an archive index (\"format\" is not {INDEX_FORMAT:?})")));
    }
    let dir = path.parent().unwrap_or(Path::new(".")); // no parent (a bare name): the working directory
    let name = |s: &str| -> Result<PathBuf> {
        let p = Path::new(s);
        if s.is_empty() || p.components().count() != 1 || p.is_absolute() || s == ".." || s == "." {
            return Err(bad(format!("names {s:?}, which is not a file beside the index")));
        }
        Ok(dir.join(p))
    };
    let files = v
        .get("files")
        .and_then(|f| f.as_array())
        .ok_or_else(|| bad("has no \"files\" list".into()))?
        .iter()
        .map(|f| f.as_str().ok_or_else(|| bad("lists a file that is not a string".into())).and_then(name))
        .collect::<Result<Vec<_>>>()?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("has no \"weight_map\" object".into()))?
        .iter()
        .map(|(k, f)| {
            let f = f.as_str().ok_or_else(|| bad(format!("maps key {k:?} to something that is not a file name")))?;
            let f = name(f)?;
            if !files.contains(&f) {
                return Err(bad(format!("maps key {k:?} to {}, which \"files\" does not list", f.display())));
            }
            Ok((k.clone(), f))
        })
        .collect::<Result<BTreeMap<_, _>>>()?;
    Ok((files, map))
}

#[cfg(test)]
mod tests {
    use super::{ArchiveSet, INDEX_FORMAT, shard_count};
    use crate::Error;
    use tapeout_irpa::{ArchiveWriter, BytesSource};

    #[test]
    fn a_set_holds_each_key_once_and_an_index_names_only_files_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        for (name, key) in [("a.irpa", "k"), ("b.irpa", "k"), ("c.irpa", "other")] {
            let mut w = ArchiveWriter::new();
            w.add_data(key, BytesSource(&[1, 2, 3])).unwrap();
            w.write(dir.path().join(name)).unwrap();
        }
        let paths = |names: &[&str]| names.iter().map(|n| dir.path().join(n)).collect::<Vec<_>>();
        let Err(e) = ArchiveSet::open(&paths(&["a.irpa", "b.irpa"])) else { panic!("a key in two archives") };
        let b = dir.path().join("b.irpa");
        assert!(
            matches!(&e, Error::ArchiveSet { path, problem } if *path == b && problem.contains("\"k\" is also in")
                && problem.contains("a.irpa")),
            "{e}"
        );
        let set = ArchiveSet::open(&paths(&["a.irpa", "c.irpa"])).unwrap();
        assert_eq!(set.get("other").unwrap().0, dir.path().join("c.irpa"));
        let e = set.get("nope").unwrap_err();
        let a = dir.path().join("a.irpa");
        assert!(
            matches!(&e, Error::ArchiveSet { path, problem } if *path == a && problem.contains("key \"nope\"")),
            "{e}"
        );

        for (files, map, needle) in [
            (r#"["../a.irpa"]"#, r#"{}"#, "not a file beside the index"),
            (r#"["a.irpa"]"#, r#"{"k": "c.irpa"}"#, "which \"files\" does not list"),
            (r#"["a.irpa", "c.irpa"]"#, r#"{"k": "a.irpa"}"#, "does not list key \"other\""),
        ] {
            let index = format!(r#"{{"format": "{INDEX_FORMAT}", "files": {files}, "weight_map": {map}}}"#);
            std::fs::write(dir.path().join("m.irpa.index.json"), index).unwrap();
            let Err(e) = ArchiveSet::open(&paths(&["m.irpa.index.json"])) else { panic!("{files} {map}") };
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn shard_names_are_recognised_only_exactly() {
        assert_eq!(shard_count("m", "m-00002-of-00003.irpa"), Some(3));
        assert_eq!(shard_count("m", "m-2-of-3.irpa"), None);
        assert_eq!(shard_count("m", "mm-00002-of-00003.irpa"), None);
        assert_eq!(shard_count("m", "m-00002-of-00003.irpa.tmp"), None);
        assert_eq!(super::shard_file_name("tiny_llm", 1, 12), "tiny_llm-00001-of-00012.irpa");
    }
}
