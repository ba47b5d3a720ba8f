//! SOPS decryption, as Flux's `decryption: {provider: sops}` does it: files encrypted by the
//! `sops` tool (YAML and JSON documents, dotenv and INI files, and any other file in sops' binary
//! envelope) are decrypted with age and OpenPGP keys before the build, so objects and
//! `secretGenerator` sources both read plaintext. Each value is AES-256-GCM with its path as
//! additional data; the file's MAC (SHA-512 over every value in document order, encrypted
//! with the data key) is verified, so a file changed after encryption is refused.
//!
//! Pure: keys in, bytes out. Errors name the file and what to do; they never quote a value,
//! encrypted or not.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes256;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use sha2::{Digest, Sha512};
use thiserror::Error;

use crate::load::SourceFile;

/// The largest encrypted file decrypted (Flux's limit): bigger ones are refused.
pub const MAX_FILE: usize = 5 << 20;

/// The annotation Flux reads to leave one object encrypted.
pub const DECRYPT_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/decrypt";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SopsError {
    #[error("{file}: {message}")]
    File { file: String, message: String },
    #[error("{entry}: {message}")]
    Key { entry: String, message: String },
}

/// How sops stored a file, read from its name as sops and Flux read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
    Dotenv,
    Ini,
    /// Any other file: a JSON envelope `{"data": ENC[…], "sops": {…}}`.
    Binary,
}

impl Format {
    pub fn for_path(path: &str) -> Format {
        let name = path.rsplit('/').next().unwrap_or(path);
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        match ext {
            "yaml" | "yml" => Format::Yaml,
            "json" | "dockerconfigjson" => Format::Json,
            "env" => Format::Dotenv,
            "ini" => Format::Ini,
            _ => Format::Binary,
        }
    }

    /// Bytes every file sops encrypted in this format holds.
    fn marker(self) -> &'static [u8] {
        match self {
            Format::Yaml => b"mac: ENC[",
            Format::Json | Format::Binary => b"\"mac\": \"ENC[",
            Format::Dotenv => b"sops_mac=ENC[",
            Format::Ini => b"[sops]",
        }
    }
}

/// The private keys of a Kustomization's `decryption.secretRef`: age identities (entries named
/// `*.agekey`) and OpenPGP secret keys (`*.asc`), Flux's names.
#[derive(Default)]
pub struct Keys {
    age: Vec<age::x25519::Identity>,
    pgp: Vec<pgp::composed::SignedSecretKey>,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Keys({} age, {} OpenPGP)",
            self.age.len(),
            self.pgp.len()
        )
    }
}

impl Keys {
    /// Reads a Secret's data; entries with other names are skipped, as Flux skips them.
    pub fn from_secret(data: &BTreeMap<String, Vec<u8>>) -> Result<Keys, SopsError> {
        let mut keys = Keys::default();
        for (entry, bytes) in data {
            let bad = |message: String| SopsError::Key {
                entry: entry.clone(),
                message,
            };
            let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
            if entry.ends_with(".agekey") {
                let lines = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'));
                for (i, line) in lines.enumerate() {
                    let id = line.parse::<age::x25519::Identity>().map_err(|_| {
                        bad(format!(
                            "key {} is not an age identity (AGE-SECRET-KEY-1…)",
                            i + 1
                        ))
                    })?;
                    keys.age.push(id);
                }
            } else if entry.ends_with(".asc") {
                use pgp::composed::Deserializable;
                // One entry may hold several armored blocks, one key each.
                const BEGIN: &str = "-----BEGIN PGP PRIVATE KEY BLOCK-----";
                let blocks = text.match_indices(BEGIN).map(|(at, _)| &text[at..]);
                let mut any = false;
                for block in blocks {
                    let (key, _) = pgp::composed::SignedSecretKey::from_string(block)
                        .map_err(|e| bad(format!("not an armored OpenPGP private key: {e}")))?;
                    keys.pgp.push(key);
                    any = true;
                }
                if !any {
                    return Err(bad("no armored OpenPGP private key in it".into()));
                }
            }
        }
        Ok(keys)
    }

    pub fn is_empty(&self) -> bool {
        self.age.is_empty() && self.pgp.is_empty()
    }
}

/// Decrypts every SOPS-encrypted file among `files` in place; files that are not are left as
/// they are.
pub fn decrypt_files(files: &mut [SourceFile], keys: &Keys) -> Result<(), SopsError> {
    for file in files {
        if let Some(plain) = decrypt_file(&file.path, &file.data, keys)? {
            file.data = plain;
        }
    }
    Ok(())
}

/// Decrypts `data` if it is a file sops encrypted in the format its name says; `None` when it
/// is not one (nothing to do).
pub fn decrypt_file(path: &str, data: &[u8], keys: &Keys) -> Result<Option<Vec<u8>>, SopsError> {
    let format = Format::for_path(path);
    if !contains(data, format.marker()) {
        return Ok(None);
    }
    let fail = |message: String| SopsError::File {
        file: path.to_string(),
        message,
    };
    if data.len() > MAX_FILE {
        return Err(fail(format!(
            "encrypted file of {} bytes is over skewer's limit of {MAX_FILE}",
            data.len()
        )));
    }
    let text = std::str::from_utf8(data).map_err(|_| fail("not UTF-8".into()))?;
    let out = match format {
        Format::Ini => Some(ini(text, keys).map_err(fail)?),
        Format::Dotenv => Some(dotenv(text, keys).map_err(fail)?),
        Format::Json | Format::Binary => {
            let doc: Node = serde_json::from_str(text)
                .map_err(|e| fail(format!("line {}: not JSON: {}", e.line(), e.classify_msg())))?;
            match (format, document(doc, keys).map_err(fail)?) {
                (_, Doc::Plain(_)) => None,
                (Format::Binary, Doc::Decrypted(v)) => match v.get("data") {
                    Some(Value::String(s)) if v.as_object().is_some_and(|m| m.len() == 1) => {
                        Some(s.clone().into_bytes())
                    }
                    _ => return Err(fail("a binary sops file holds one string, 'data'".into())),
                },
                (_, Doc::Decrypted(v)) => Some(json_bytes(&v)),
            }
        }
        Format::Yaml => {
            let docs: Vec<Node> = serde_saphyr::from_multiple_with_options(
                text,
                crate::load::yaml_options(crate::load::Dialect::Kustomize),
            )
            .map_err(|e| fail(format!("not YAML: {}", crate::load::parse_message(&e))))?;
            let mut any = false;
            let mut out = Vec::new();
            for (i, doc) in docs.into_iter().enumerate() {
                let doc =
                    document(doc, keys).map_err(|m| fail(format!("document {}: {m}", i + 1)))?;
                let value = match doc {
                    Doc::Plain(v) => v,
                    Doc::Decrypted(v) => {
                        any = true;
                        v
                    }
                };
                if i > 0 {
                    out.extend_from_slice(b"\n---\n");
                }
                out.extend(json_bytes(&value));
            }
            any.then_some(out)
        }
    };
    Ok(out)
}

trait Classify {
    fn classify_msg(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    /// What is wrong, without the error's own words (which may quote the input).
    fn classify_msg(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "a syntax error",
            serde_json::error::Category::Data => "unexpected data",
            serde_json::error::Category::Eof => "it ends too early",
        }
    }
}

fn json_bytes(v: &Value) -> Vec<u8> {
    // A `Value` always serialises.
    serde_json::to_vec(v).unwrap_or_default()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

enum Doc {
    /// Not encrypted (no `sops` key), or left encrypted by Flux's annotation.
    Plain(Value),
    Decrypted(Value),
}

/// One YAML or JSON document: decrypted when it carries sops metadata.
fn document(doc: Node, keys: &Keys) -> Result<Doc, String> {
    let Node::Map(mut items) = doc else {
        return Ok(Doc::Plain(doc.into_value()));
    };
    let Some(at) = items.iter().position(|(k, _)| k == "sops") else {
        return Ok(Doc::Plain(Node::Map(items).into_value()));
    };
    let disabled = items
        .iter()
        .find(|(k, _)| k == "metadata")
        .and_then(|(_, m)| m.get("annotations"))
        .and_then(|a| a.get(DECRYPT_ANNOTATION))
        .is_some_and(|v| matches!(v, Node::Str(s) if s == "disabled"));
    if disabled {
        return Ok(Doc::Plain(Node::Map(items).into_value()));
    }
    let (_, meta) = items.remove(at);
    let meta: Metadata = serde_json::from_value(meta.into_value())
        .map_err(|e| format!("the sops metadata is not readable: {e}"))?;
    let tree = decrypt_tree(Node::Map(items), &meta, keys)?;
    Ok(Doc::Decrypted(tree.into_value()))
}

/// A dotenv file: `KEY=VALUE` lines, sops' metadata flattened into `sops_*` keys.
fn dotenv(text: &str, keys: &Keys) -> Result<Vec<u8>, String> {
    let mut items = Vec::new();
    let mut meta = serde_json::Map::new();
    for (n, line) in text.split('\n').enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: not KEY=VALUE", n + 1));
        };
        let value = value.replace("\\n", "\n");
        match key.strip_prefix("sops_") {
            Some(flat) => unflatten(&mut meta, flat, value),
            None => items.push((key.to_string(), Node::Str(value))),
        }
    }
    let plain = decrypt_flattened(items, meta, keys, "sops_* lines")?;
    let mut out = String::new();
    for (key, value) in plain {
        let value = match value.into_value() {
            Value::String(s) => s.replace('\n', "\\n"),
            other => other.to_string(),
        };
        out.push_str(&format!("{key}={value}\n"));
    }
    Ok(out.into_bytes())
}

/// Decrypts the entries of a file whose sops metadata was flattened into keys (dotenv, INI),
/// that metadata having been gathered as `meta` (`where_` says where it is written).
fn decrypt_flattened(
    items: Vec<(String, Node)>,
    meta: serde_json::Map<String, Value>,
    keys: &Keys,
    where_: &str,
) -> Result<Vec<(String, Node)>, String> {
    if meta.is_empty() {
        return Err(format!("no sops metadata ({where_})"));
    }
    let meta: Metadata = serde_json::from_value(Value::Object(meta))
        .map_err(|e| format!("the sops metadata is not readable: {e}"))?;
    match decrypt_tree(Node::Map(items), &meta, keys)? {
        Node::Map(plain) => Ok(plain),
        _ => Err("the decrypted file is not a list of entries".into()),
    }
}

/// An INI file: `[section]`s of `key = value` (`;` and `#` start comments; keys before any
/// section are in `DEFAULT`), sops' metadata flattened into the `[sops]` section as a dotenv
/// file's. Each value's path is its section, then its key.
fn ini(text: &str, keys: &Keys) -> Result<Vec<u8>, String> {
    let mut sections: Vec<(String, Node)> = vec![("DEFAULT".into(), Node::Map(Vec::new()))];
    let mut meta = serde_json::Map::new();
    let mut in_sops = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_sops = name.trim() == "sops";
            if !in_sops {
                sections.push((name.trim().to_string(), Node::Map(Vec::new())));
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: not key = value", n + 1));
        };
        let (key, value) = (key.trim(), value.trim());
        if in_sops {
            unflatten(&mut meta, key, value.replace("\\n", "\n"));
        } else if let Some((_, Node::Map(items))) = sections.last_mut() {
            items.push((key.to_string(), Node::Str(value.to_string())));
        }
    }
    let plain = decrypt_flattened(sections, meta, keys, "a [sops] section")?;
    let mut out = String::new();
    for (section, body) in plain {
        let Value::Object(items) = body.into_value() else {
            continue;
        };
        if section == "DEFAULT" && items.is_empty() {
            continue;
        }
        out.push_str(&format!("[{section}]\n"));
        for (key, value) in items {
            let value = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            out.push_str(&format!("{key} = {value}\n"));
        }
        out.push('\n');
    }
    Ok(out.into_bytes())
}

/// Puts `value` at a flattened sops path like `age__list_0__map_enc` (sops' dotenv form: a
/// key, then `__map_<key>` and `__list_<index>` steps).
fn unflatten(meta: &mut serde_json::Map<String, Value>, flat: &str, value: String) {
    // Each token with whether it follows a `__list_` separator.
    let mut tokens: Vec<(&str, bool)> = Vec::new();
    let (mut rest, mut list) = (flat, false);
    loop {
        let next = [("__map_", false), ("__list_", true)]
            .into_iter()
            .filter_map(|(sep, is_list)| rest.find(sep).map(|at| (at, sep.len(), is_list)))
            .min_by_key(|(at, ..)| *at);
        match next {
            Some((at, len, is_list)) => {
                tokens.push((&rest[..at], list));
                rest = &rest[at + len..];
                list = is_list;
            }
            None => {
                tokens.push((rest, list));
                break;
            }
        }
    }
    let mut node = meta.entry(tokens[0].0.to_string()).or_insert(Value::Null);
    for (token, is_list) in tokens.into_iter().skip(1) {
        match token.parse::<usize>() {
            // An index, bounded: a metadata list is a few recipients long.
            Ok(index) if is_list && index < 256 => {
                if !node.is_array() {
                    *node = Value::Array(Vec::new());
                }
                let Value::Array(items) = node else { return };
                if items.len() <= index {
                    items.resize(index + 1, Value::Null);
                }
                node = &mut items[index];
            }
            _ => {
                if !node.is_object() {
                    *node = Value::Object(serde_json::Map::new());
                }
                let Value::Object(map) = node else { return };
                node = map.entry(token.to_string()).or_insert(Value::Null);
            }
        }
    }
    *node = match value.as_str() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(value),
    };
}

/// The parts of sops' metadata skewer reads.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Metadata {
    /// The recipients written at the top level (sops' files without `key_groups`).
    #[serde(flatten)]
    top: Group,
    key_groups: Option<Vec<Group>>,
    shamir_threshold: Option<u64>,
    lastmodified: String,
    mac: String,
    unencrypted_suffix: Option<String>,
    encrypted_suffix: Option<String>,
    unencrypted_regex: Option<String>,
    encrypted_regex: Option<String>,
    unencrypted_comment_regex: Option<String>,
    encrypted_comment_regex: Option<String>,
    mac_only_encrypted: Option<bool>,
}

#[derive(serde::Deserialize, Default, Clone)]
#[serde(default)]
struct Group {
    age: Option<Vec<Stanza>>,
    pgp: Option<Vec<Stanza>>,
    kms: Option<Vec<Value>>,
    gcp_kms: Option<Vec<Value>>,
    azure_kv: Option<Vec<Value>>,
    hc_vault: Option<Vec<Value>>,
    hckms: Option<Vec<Value>>,
}

/// One recipient's copy of the data key.
#[derive(serde::Deserialize, Default, Clone)]
#[serde(default)]
struct Stanza {
    enc: String,
    recipient: String,
    fp: String,
}

impl Metadata {
    /// The one key group (the top-level lists, or `key_groups` of one group).
    fn group(&self) -> Result<Group, String> {
        match &self.key_groups {
            Some(groups) if groups.len() > 1 || self.shamir_threshold.unwrap_or(0) > 1 => Err(
                "the data key is split over several key groups (Shamir); skewer decrypts files with one key group"
                    .into(),
            ),
            Some(groups) => Ok(groups.first().cloned().unwrap_or_default()),
            None => Ok(self.top.clone()),
        }
    }
}

impl Group {
    /// The data key, from the first age or OpenPGP recipient one of `keys` opens.
    fn data_key(&self, keys: &Keys) -> Result<[u8; 32], String> {
        let age = self.age.as_deref().unwrap_or_default();
        let pgp = self.pgp.as_deref().unwrap_or_default();
        if age.is_empty() && pgp.is_empty() {
            let cloud: Vec<&str> = [
                ("kms", &self.kms),
                ("gcp_kms", &self.gcp_kms),
                ("azure_kv", &self.azure_kv),
                ("hc_vault", &self.hc_vault),
                ("hckms", &self.hckms),
            ]
            .into_iter()
            .filter(|(_, v)| v.as_ref().is_some_and(|v| !v.is_empty()))
            .map(|(n, _)| n)
            .collect();
            return Err(format!(
                "encrypted only for {} ({}); skewer decrypts with age and OpenPGP keys, which need no cloud credentials: add an age or OpenPGP recipient (sops updatekeys)",
                if cloud.is_empty() {
                    "no recipient"
                } else {
                    "cloud key services"
                },
                cloud.join(", ")
            ));
        }
        let identities: Vec<&dyn age::Identity> =
            keys.age.iter().map(|i| i as &dyn age::Identity).collect();
        if !identities.is_empty() {
            for stanza in age {
                if let Some(key) = open_age(&stanza.enc, &identities) {
                    return Ok(key);
                }
            }
        }
        if !keys.pgp.is_empty() {
            for stanza in pgp {
                if let Some(key) = open_pgp(&stanza.enc, &keys.pgp) {
                    return Ok(key);
                }
            }
        }
        let mut recipients: Vec<String> =
            age.iter().map(|s| format!("age {}", s.recipient)).collect();
        recipients.extend(pgp.iter().map(|s| format!("OpenPGP {}", s.fp)));
        Err(format!(
            "no key of the decryption Secret opens it (it is encrypted for {}; the Secret holds {} age and {} OpenPGP keys)",
            recipients.join(", "),
            keys.age.len(),
            keys.pgp.len()
        ))
    }
}

fn open_age(enc: &str, identities: &[&dyn age::Identity]) -> Option<[u8; 32]> {
    let reader = age::armor::ArmoredReader::new(enc.as_bytes());
    let decryptor = age::Decryptor::new(reader).ok()?;
    let mut plain = Vec::new();
    decryptor
        .decrypt(identities.iter().copied())
        .ok()?
        .take(64)
        .read_to_end(&mut plain)
        .ok()?;
    plain.try_into().ok()
}

fn open_pgp(enc: &str, keys: &[pgp::composed::SignedSecretKey]) -> Option<[u8; 32]> {
    let (message, _) = pgp::composed::Message::from_string(enc).ok()?;
    let password = pgp::types::Password::empty();
    let mut message = message
        .decrypt_with_keys(vec![&password; keys.len()], keys.iter().collect())
        .ok()?;
    if message.is_compressed() {
        message = message.decompress().ok()?;
    }
    let plain = message.as_data_vec().ok()?;
    plain.try_into().ok()
}

/// Which values sops encrypted, from the metadata's rules.
struct Rules {
    unencrypted_suffix: Option<String>,
    encrypted_suffix: Option<String>,
    unencrypted_regex: Option<regex::Regex>,
    encrypted_regex: Option<regex::Regex>,
    mac_only_encrypted: bool,
}

impl Rules {
    fn new(meta: &Metadata) -> Result<Rules, String> {
        if meta.unencrypted_comment_regex.is_some() || meta.encrypted_comment_regex.is_some() {
            return Err(
                "encrypted_comment_regex and unencrypted_comment_regex are not supported; re-encrypt with encrypted_regex or a suffix"
                    .into(),
            );
        }
        let regex = |field: &str, r: &Option<String>| {
            r.as_deref()
                .filter(|r| !r.is_empty())
                .map(|r| {
                    regex::RegexBuilder::new(r)
                        .size_limit(1 << 20)
                        .build()
                        .map_err(|e| format!("sops.{field}: {e}"))
                })
                .transpose()
        };
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        Ok(Rules {
            unencrypted_suffix: nonempty(&meta.unencrypted_suffix),
            encrypted_suffix: nonempty(&meta.encrypted_suffix),
            unencrypted_regex: regex("unencrypted_regex", &meta.unencrypted_regex)?,
            encrypted_regex: regex("encrypted_regex", &meta.encrypted_regex)?,
            mac_only_encrypted: meta.mac_only_encrypted.unwrap_or(false),
        })
    }

    /// sops' rule: each set rule can turn encryption off or (for the `encrypted_*` ones)
    /// require a match somewhere on the path.
    fn encrypted(&self, path: &[String]) -> bool {
        let mut encrypted = true;
        if let Some(s) = &self.unencrypted_suffix
            && path.iter().any(|p| p.ends_with(s.as_str()))
        {
            encrypted = false;
        }
        if let Some(s) = &self.encrypted_suffix {
            encrypted = path.iter().any(|p| p.ends_with(s.as_str()));
        }
        if let Some(r) = &self.unencrypted_regex
            && path.iter().any(|p| r.is_match(p))
        {
            encrypted = false;
        }
        if let Some(r) = &self.encrypted_regex {
            encrypted = path.iter().any(|p| r.is_match(p));
        }
        encrypted
    }
}

/// Decrypts every encrypted value of `tree` and checks the MAC.
fn decrypt_tree(tree: Node, meta: &Metadata, keys: &Keys) -> Result<Node, String> {
    let rules = Rules::new(meta)?;
    let key = meta.group()?.data_key(keys)?;
    let mut walk = Walk {
        rules: &rules,
        key: &key,
        path: Vec::new(),
        mac: Sha512::new(),
    };
    if rules.mac_only_encrypted {
        walk.mac.update(MAC_ONLY_ENCRYPTED);
    }
    let plain = walk.node(tree)?;
    let computed = hex::encode_upper(walk.mac.finalize());
    let stored = match decrypt_value(&meta.mac, &key, &meta.lastmodified) {
        Ok(Node::Str(s)) => s,
        _ => {
            return Err(
                "its MAC does not decrypt with its data key: the metadata was changed after it was encrypted"
                    .into(),
            );
        }
    };
    if stored != computed {
        return Err(
            "MAC mismatch: the file was changed after it was encrypted (re-encrypt it with sops)"
                .into(),
        );
    }
    Ok(plain)
}

/// The bytes sops hashes first when `mac_only_encrypted` is set.
const MAC_ONLY_ENCRYPTED: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

struct Walk<'a> {
    rules: &'a Rules,
    key: &'a [u8; 32],
    path: Vec<String>,
    mac: Sha512,
}

impl Walk<'_> {
    fn node(&mut self, node: Node) -> Result<Node, String> {
        match node {
            Node::Map(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (k, v) in items {
                    self.path.push(k);
                    let v = self.node(v)?;
                    let k = self.path.pop().unwrap_or_default();
                    out.push((k, v));
                }
                Ok(Node::Map(out))
            }
            Node::Seq(items) => items
                .into_iter()
                .map(|v| self.node(v))
                .collect::<Result<_, _>>()
                .map(Node::Seq),
            Node::Null => Ok(Node::Null),
            leaf => {
                let encrypted = self.rules.encrypted(&self.path);
                let plain = if encrypted {
                    let Node::Str(s) = &leaf else {
                        return Err(format!(
                            "{}: expected an encrypted value, found a plain one",
                            self.path.join(".")
                        ));
                    };
                    let aad = format!("{}:", self.path.join(":"));
                    decrypt_value(s, self.key, &aad)
                        .map_err(|why| format!("{}: {why}", self.path.join(".")))?
                } else {
                    leaf
                };
                if !self.rules.mac_only_encrypted || encrypted {
                    self.mac.update(plain.mac_bytes());
                }
                Ok(plain)
            }
        }
    }
}

/// Decrypts one `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`; the empty string stays empty.
fn decrypt_value(enc: &str, key: &[u8; 32], aad: &str) -> Result<Node, String> {
    if enc.is_empty() {
        return Ok(Node::Str(String::new()));
    }
    let body = enc
        .strip_prefix("ENC[AES256_GCM,data:")
        .and_then(|b| b.strip_suffix(']'))
        .ok_or("not a sops-encrypted value")?;
    let (data, rest) = body.split_once(",iv:").ok_or("no iv")?;
    let (iv, rest) = rest.split_once(",tag:").ok_or("no tag")?;
    let (tag, kind) = rest.split_once(",type:").ok_or("no type")?;
    let decode = |field: &str, b: &str| {
        B64.decode(b)
            .map_err(|_| format!("its {field} is not base64"))
    };
    let (mut data, iv, tag) = (
        decode("data", data)?,
        decode("iv", iv)?,
        decode("tag", tag)?,
    );
    if iv.len() != 32 || tag.len() != 16 {
        return Err("not a sops AES-256-GCM value (32-byte iv, 16-byte tag)".into());
    }
    data.extend_from_slice(&tag);
    let cipher = aes_gcm::AesGcm::<Aes256, U32>::new(key.into());
    let plain = cipher
        .decrypt(
            aes_gcm::Nonce::<U32>::from_slice(&iv),
            Payload {
                msg: &data,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| "it does not decrypt with the file's data key (changed after encryption?)")?;
    let text = || String::from_utf8(plain.clone()).map_err(|_| "its plaintext is not UTF-8");
    Ok(match kind {
        "str" | "bytes" | "time" | "comment" => Node::Str(text()?),
        "int" => Node::Int(text()?.parse().map_err(|_| "its plaintext is not an int")?),
        "float" => Node::Float(
            text()?
                .parse()
                .map_err(|_| "its plaintext is not a float")?,
        ),
        "bool" => Node::Bool(match text()?.as_str() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
            "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
            _ => return Err("its plaintext is not a bool".into()),
        }),
        _ => return Err("its type is not one sops writes".into()),
    })
}

/// A YAML or JSON tree that keeps its mappings in document order (the MAC is over values in
/// that order).
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    Str(String),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Null,
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The bytes sops hashes for a value.
    fn mac_bytes(&self) -> Vec<u8> {
        match self {
            Node::Str(s) => s.as_bytes().to_vec(),
            Node::Int(i) => i.to_string().into_bytes(),
            Node::UInt(u) => u.to_string().into_bytes(),
            Node::Float(f) => format!("{f}").into_bytes(),
            Node::Bool(true) => b"True".to_vec(),
            Node::Bool(false) => b"False".to_vec(),
            Node::Map(_) | Node::Seq(_) | Node::Null => Vec::new(),
        }
    }

    fn into_value(self) -> Value {
        match self {
            Node::Map(items) => Value::Object(
                items
                    .into_iter()
                    .map(|(k, v)| (k, v.into_value()))
                    .collect(),
            ),
            Node::Seq(items) => Value::Array(items.into_iter().map(Node::into_value).collect()),
            Node::Str(s) => Value::String(s),
            Node::Int(i) => Value::from(i),
            Node::UInt(u) => Value::from(u),
            Node::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
            Node::Bool(b) => Value::Bool(b),
            Node::Null => Value::Null,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::UInt(v), Node::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        serde::Deserialize::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut items: Vec<(String, Node)> = Vec::new();
        while let Some((k, v)) = map.next_entry::<Node, Node>()? {
            let key = match k {
                Node::Str(s) => s,
                Node::Int(i) => i.to_string(),
                Node::UInt(u) => u.to_string(),
                Node::Bool(b) => b.to_string(),
                _ => return Err(de::Error::custom("a mapping key is not a string")),
            };
            items.push((key, v));
        }
        Ok(Node::Map(items))
    }
}

/// Whether an object still carries sops metadata (a file left encrypted): such an object must
/// never be applied as it is.
pub fn is_encrypted(object: &Value) -> bool {
    object["sops"]["mac"].is_string()
}

#[cfg(test)]
mod tests;
