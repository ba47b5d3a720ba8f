//! Reading a `.tar.gz` nobody vouches for (an OCI artifact's layer, say) into files, in
//! memory, within limits: its compressed and uncompressed size, how many entries it has and
//! how far it inflates. Absolute paths, `..`, links that leave the archive, devices and FIFOs
//! refuse the whole archive, with the entry named. Nothing is written anywhere: a link inside
//! the archive becomes a copy of the file it names.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::rc::Rc;

use flate2::read::GzDecoder;
use thiserror::Error;

use crate::artifact::File;

/// How much an archive may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the `.tar.gz` itself.
    pub compressed: u64,
    /// Bytes once inflated (the tar stream, headers included).
    pub uncompressed: u64,
    /// Entries of any kind.
    pub entries: usize,
    /// Inflated bytes per compressed byte, once past [`RATIO_FLOOR`] inflated bytes.
    pub ratio: u64,
}

/// Small archives may compress as well as they like.
pub const RATIO_FLOOR: u64 = 8 << 20;

impl Default for Limits {
    fn default() -> Self {
        Self {
            compressed: 64 << 20,
            uncompressed: 256 << 20,
            entries: 100_000,
            ratio: 200,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refused {
    #[error("the archive is {size} bytes compressed, more than the limit of {limit}")]
    Compressed { size: u64, limit: u64 },
    #[error("the archive inflates past {limit} bytes (the limit)")]
    Uncompressed { limit: u64 },
    #[error(
        "the archive inflates more than {ratio} times its {compressed} compressed bytes (a gzip bomb?)"
    )]
    Ratio { ratio: u64, compressed: u64 },
    #[error("the archive has more than {limit} entries")]
    Entries { limit: usize },
    #[error("entry '{entry}': {why}")]
    Entry { entry: String, why: String },
    #[error("the archive cannot be read: {0}")]
    Corrupt(String),
}

/// Counts the bytes read through it.
struct Counted<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get().saturating_add(n as u64));
        Ok(n)
    }
}

/// Counts the bytes inflated through it and refuses to go past a bound, or, once past
/// [`RATIO_FLOOR`], past `ratio` times the compressed bytes consumed so far: a gzip bomb is
/// refused a few MiB into its first member, not once it has filled memory.
struct Bounded<R> {
    inner: R,
    read: Rc<Cell<u64>>,
    consumed: Rc<Cell<u64>>,
    bound: u64,
    ratio: u64,
    /// Set when it refused: the reader's error is the bound, not a corrupt archive.
    tripped: Rc<Cell<bool>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.read.get().saturating_add(n as u64);
        self.read.set(total);
        let so_far = self
            .consumed
            .get()
            .saturating_mul(self.ratio)
            .max(RATIO_FLOOR);
        if total > self.bound || total > so_far {
            self.tripped.set(true);
            return Err(io::Error::other("inflation bound"));
        }
        Ok(n)
    }
}

/// The files of `bytes`, a `.tar.gz`, within `limits`.
pub fn read(bytes: &[u8], limits: Limits) -> Result<Vec<File>, Refused> {
    let compressed = bytes.len() as u64;
    if compressed > limits.compressed {
        return Err(Refused::Compressed {
            size: compressed,
            limit: limits.compressed,
        });
    }
    // The tightest of the two bounds on inflation: the size limit and the ratio.
    let by_ratio = compressed.saturating_mul(limits.ratio).max(RATIO_FLOOR);
    let bound = limits.uncompressed.min(by_ratio);
    let inflated = Rc::new(Cell::new(0u64));
    let consumed = Rc::new(Cell::new(0u64));
    let tripped = Rc::new(Cell::new(false));
    let reader = Bounded {
        inner: GzDecoder::new(Counted {
            inner: bytes,
            read: consumed.clone(),
        }),
        read: inflated.clone(),
        consumed,
        bound,
        ratio: limits.ratio,
        tripped: tripped.clone(),
    };
    let too_big = || {
        if inflated.get() <= limits.uncompressed {
            Refused::Ratio {
                ratio: limits.ratio,
                compressed,
            }
        } else {
            Refused::Uncompressed {
                limit: limits.uncompressed,
            }
        }
    };
    let failed = |e: io::Error| {
        if tripped.get() {
            too_big()
        } else {
            Refused::Corrupt(e.to_string())
        }
    };

    let mut archive = tar::Archive::new(reader);
    let mut files: BTreeMap<String, File> = BTreeMap::new();
    // (entry, where it points, whether the target is relative to the archive root)
    let mut links: Vec<(String, String, bool)> = Vec::new();
    let entries = archive.entries().map_err(failed)?;
    for (count, entry) in entries.enumerate() {
        if count >= limits.entries {
            return Err(Refused::Entries {
                limit: limits.entries,
            });
        }
        let mut entry = entry.map_err(failed)?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let refuse = |why: &str| Refused::Entry {
            entry: raw.clone(),
            why: why.into(),
        };
        let kind = entry.header().entry_type();
        let path = match clean(&raw) {
            Ok(p) => p,
            Err(why) => return Err(refuse(why)),
        };
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let executable = entry
                    .header()
                    .mode()
                    .map(|m| m & 0o111 != 0)
                    .unwrap_or(false);
                // Sized from the header, within what may still inflate and at most 1 MiB up
                // front: a header is the archive's word, not a promise.
                let room = bound.saturating_sub(inflated.get());
                let size = entry.header().size().unwrap_or(0).min(room).min(1 << 20);
                let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                entry.read_to_end(&mut data).map_err(failed)?;
                files.insert(
                    path.clone(),
                    File {
                        path,
                        executable,
                        data,
                    },
                );
            }
            tar::EntryType::Directory => {}
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .ok_or_else(|| refuse("a link without a target"))?;
                links.push((path, target, kind == tar::EntryType::Link));
            }
            tar::EntryType::Char | tar::EntryType::Block => {
                return Err(refuse("a device file"));
            }
            tar::EntryType::Fifo => return Err(refuse("a FIFO")),
            // Metadata of the archive itself (PAX and GNU headers the reader folds in).
            tar::EntryType::XGlobalHeader
            | tar::EntryType::XHeader
            | tar::EntryType::GNULongName
            | tar::EntryType::GNULongLink => {}
            _ => return Err(refuse("an entry type skewer does not read")),
        }
    }
    for (path, target, from_root) in links {
        let resolved = resolve(&path, &target, from_root).map_err(|why| Refused::Entry {
            entry: path.clone(),
            why: format!("links to '{target}': {why}"),
        })?;
        let Some(file) = files.get(&resolved).cloned() else {
            return Err(Refused::Entry {
                entry: path,
                why: format!("links to '{target}', which is not a file of the archive"),
            });
        };
        files.insert(path.clone(), File { path, ..file });
    }
    Ok(files.into_values().collect())
}

/// A path inside the archive, normalised (`./a//b` is `a/b`), or why it cannot be one.
fn clean(raw: &str) -> Result<String, &'static str> {
    if raw.starts_with('/') || raw.starts_with('\\') || raw.as_bytes().get(1) == Some(&b':') {
        return Err("an absolute path");
    }
    let mut parts = Vec::new();
    for part in raw.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => return Err("a path with '..'"),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Ok(String::new());
    }
    Ok(parts.join("/"))
}

/// Where a link at `path` pointing to `target` leads, inside the archive. Hard links name a
/// path from the archive's root; symbolic links one relative to their own directory.
fn resolve(path: &str, target: &str, from_root: bool) -> Result<String, &'static str> {
    if target.starts_with('/') {
        return Err("an absolute path, outside the archive");
    }
    let mut parts: Vec<&str> = if from_root {
        Vec::new()
    } else {
        let mut dir: Vec<&str> = path.split('/').collect();
        dir.pop();
        dir
    };
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("outside the archive");
                }
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    enum E<'a> {
        File(&'a str, &'a [u8]),
        Link(&'a str, &'a str, tar::EntryType),
        Special(&'a str, tar::EntryType),
    }

    /// A tarball written header by header, so that hostile entries are possible.
    fn tarball(entries: &[E]) -> Vec<u8> {
        let mut tar = Vec::new();
        for e in entries {
            let mut h = tar::Header::new_gnu();
            let (name, data): (&str, &[u8]) = match e {
                E::File(n, d) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    (n, d)
                }
                E::Link(n, target, kind) => {
                    h.set_entry_type(*kind);
                    h.as_old_mut().linkname[..target.len()].copy_from_slice(target.as_bytes());
                    (n, &[])
                }
                E::Special(n, kind) => {
                    h.set_entry_type(*kind);
                    (n, &[])
                }
            };
            // Raw bytes: `set_path` itself refuses `..` and absolute paths.
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.extend_from_slice(h.as_bytes());
            tar.extend_from_slice(data);
            tar.resize(tar.len().div_ceil(512) * 512, 0);
        }
        tar.resize(tar.len() + 1024, 0);
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap()
    }

    fn refused(entries: &[E]) -> String {
        read(&tarball(entries), Limits::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn files_and_links_inside_are_read() {
        let files = read(
            &tarball(&[
                E::File("./apps/a.yaml", b"a: 1\n"),
                E::Link("apps/b.yaml", "a.yaml", tar::EntryType::Symlink),
                E::Link("c.yaml", "apps/a.yaml", tar::EntryType::Link),
                E::Special("apps/", tar::EntryType::Directory),
            ]),
            Limits::default(),
        )
        .unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["apps/a.yaml", "apps/b.yaml", "c.yaml"]);
        assert!(files.iter().all(|f| f.data == b"a: 1\n"));
    }

    #[test]
    fn hostile_entries_refuse_the_archive_naming_them() {
        for (entries, want) in [
            (
                vec![E::File("../evil.yaml", b"x")],
                "entry '../evil.yaml': a path with '..'",
            ),
            (
                vec![E::File("a/../../evil", b"x")],
                "entry 'a/../../evil': a path with '..'",
            ),
            (
                vec![E::File("/etc/passwd", b"x")],
                "entry '/etc/passwd': an absolute path",
            ),
            (
                vec![E::Link("out", "../../etc/passwd", tar::EntryType::Symlink)],
                "entry 'out': links to '../../etc/passwd': outside the archive",
            ),
            (
                vec![E::Link("abs", "/etc/passwd", tar::EntryType::Symlink)],
                "entry 'abs': links to '/etc/passwd': an absolute path, outside the archive",
            ),
            (
                vec![E::Link("hard", "../x", tar::EntryType::Link)],
                "entry 'hard': links to '../x': outside the archive",
            ),
            (
                vec![E::Link("dangling", "nope", tar::EntryType::Symlink)],
                "entry 'dangling': links to 'nope', which is not a file of the archive",
            ),
            (
                vec![E::Special("dev", tar::EntryType::Char)],
                "entry 'dev': a device file",
            ),
            (
                vec![E::Special("blk", tar::EntryType::Block)],
                "entry 'blk': a device file",
            ),
            (
                vec![E::Special("pipe", tar::EntryType::Fifo)],
                "entry 'pipe': a FIFO",
            ),
        ] {
            assert_eq!(refused(&entries), want);
        }
    }

    #[test]
    fn bombs_and_floods_are_refused() {
        // 64 MiB of zeros compress to about 64 KiB: past the ratio once past the floor.
        let zeros = vec![0u8; 64 << 20];
        let bomb = tarball(&[E::File("zeros", &zeros)]);
        let e = read(&bomb, Limits::default()).unwrap_err();
        assert!(matches!(e, Refused::Ratio { .. }), "{e}");
        // The same zeros followed by a megabyte that does not compress: over the whole
        // archive the ratio is about 60, yet the zeros are refused as they inflate, long
        // before all 64 MiB are in memory.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..1 << 20)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let hidden = tarball(&[E::File("zeros", &zeros), E::File("noise", &noise)]);
        assert!(
            (hidden.len() as u64) * 200 > 65 << 20,
            "within the overall ratio"
        );
        let e = read(&hidden, Limits::default()).unwrap_err();
        assert!(matches!(e, Refused::Ratio { .. }), "{e}");
        let small = Limits {
            uncompressed: 1 << 20,
            ..Limits::default()
        };
        let e = read(&tarball(&[E::File("big", &vec![7u8; 2 << 20])]), small).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the archive inflates past 1048576 bytes (the limit)"
        );
        let many: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
        let entries: Vec<E> = many.iter().map(|n| E::File(n, b"x")).collect();
        let few = Limits {
            entries: 10,
            ..Limits::default()
        };
        assert_eq!(
            read(&tarball(&entries), few).unwrap_err().to_string(),
            "the archive has more than 10 entries"
        );
        let tiny = Limits {
            compressed: 10,
            ..Limits::default()
        };
        assert!(matches!(read(&bomb, tiny), Err(Refused::Compressed { .. })));
        assert!(matches!(
            read(b"not gzip", Limits::default()),
            Err(Refused::Corrupt(_))
        ));
    }
}
