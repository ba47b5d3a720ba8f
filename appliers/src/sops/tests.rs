//! Against files the real `sops` encrypted (see testdata/PROVENANCE.md), never against files
//! skewer encrypted itself.

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/src/sops/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn keys(entries: &[(&str, &str)]) -> Keys {
    let data = entries
        .iter()
        .map(|(entry, file)| (entry.to_string(), fixture(file)))
        .collect();
    Keys::from_secret(&data).unwrap()
}

fn flux_age() -> Keys {
    keys(&[("identity.agekey", "flux/age.txt")])
}

fn flux_pgp() -> Keys {
    keys(&[("flux.asc", "flux/pgp.asc")])
}

fn decrypt_json(path: &str, fixture_name: &str, keys: &Keys) -> Value {
    let plain = decrypt_file(path, &fixture(fixture_name), keys)
        .unwrap()
        .expect("an encrypted file");
    serde_json::from_slice(&plain).unwrap()
}

#[test]
fn an_age_encrypted_secret_decrypts_and_its_mac_verifies() {
    let v = decrypt_json("secrets/age.yaml", "flux/age.yaml", &flux_age());
    assert_eq!(v["stringData"]["key"], "value");
    assert_eq!(v["metadata"]["name"], "age");
    assert!(v.get("sops").is_none(), "the metadata is gone");
}

#[test]
fn an_openpgp_encrypted_secret_decrypts() {
    let v = decrypt_json("pgp.yaml", "flux/pgp.yaml", &flux_pgp());
    assert_eq!(v["stringData"]["key"], "value");
}

#[test]
fn a_dotenv_file_decrypts_to_its_lines() {
    let plain = decrypt_file("envs/env.env", &fixture("flux/env.env"), &flux_age())
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8(plain).unwrap(), "key=value\n");
}

#[test]
fn a_binary_file_decrypts_to_its_bytes() {
    let plain = decrypt_file("files/file.txt", &fixture("flux/file.txt"), &flux_age())
        .unwrap()
        .unwrap();
    assert_eq!(plain, b"value");
}

/// sops' own examples: floats, booleans, lists, comments, empty values, and values left clear
/// by `_unencrypted` keys, all in the MAC.
#[test]
fn sops_own_examples_decrypt_with_every_value_type() {
    let k = keys(&[("sops.asc", "sops/sops_functional_tests_key.asc")]);
    let yaml = decrypt_json("example.yaml", "sops/example.yaml", &k);
    assert_eq!(yaml["somebooleans"], serde_json::json!([true, false]));
    assert!(yaml["number"].is_f64(), "{}", yaml["number"]);
    assert_eq!(yaml["an_array"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        yaml["nested_unencrypted"]["this"]["is"]["all"],
        "going to remain in clear text"
    );
    assert!(yaml["app2"]["db"]["password"].is_string());
    let json = decrypt_json("example.json", "sops/example.json", &k);
    assert!(json["age"].is_f64());
    assert_eq!(json["anEmptyValue"], "");
    assert_eq!(json["phoneNumbers"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_changed_file_is_refused_by_its_mac_naming_the_file() {
    // A clear value changed: every value is in the MAC.
    let text = String::from_utf8(fixture("flux/age.yaml")).unwrap();
    let renamed = text.replacen("name: age", "name: agf", 1);
    let e = decrypt_file("apps/age.yaml", renamed.as_bytes(), &flux_age()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("apps/age.yaml: document 1: MAC mismatch"),
        "{msg}"
    );
    // An encrypted value swapped for another one's ciphertext: its path is the additional
    // data, so it no longer decrypts.
    let json = String::from_utf8(fixture("sops/example.json")).unwrap();
    let v: Value = serde_json::from_str(&json).unwrap();
    let first = v["firstName"].as_str().unwrap();
    let last = v["lastName"].as_str().unwrap();
    let swapped = json.replacen(first, last, 1);
    let k = keys(&[("sops.asc", "sops/sops_functional_tests_key.asc")]);
    let msg = decrypt_file("example.json", swapped.as_bytes(), &k)
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("example.json: firstName: "), "{msg}");
    for (got, secret) in [(&msg, first), (&msg, last)] {
        assert!(!got.contains(secret), "no ciphertext in messages");
    }
}

#[test]
fn a_missing_key_is_named_with_the_recipients() {
    let msg = decrypt_file("age.yaml", &fixture("flux/age.yaml"), &flux_pgp())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("no key of the decryption Secret opens it")
            && msg.contains("age age1l44xcng8dqj32nlv6d930qvvrny05hglzcv9qpc7kxjc6902ma4qufys29"),
        "{msg}"
    );
    assert!(!msg.contains("ENC["), "{msg}");
}

#[test]
fn cloud_key_services_are_refused_by_name() {
    let text = String::from_utf8(fixture("flux/age.yaml")).unwrap();
    let start = text.find("  age:\n").unwrap();
    let end = text.find("  lastmodified").unwrap();
    let kms = format!(
        "{}  kms:\n    - arn: arn:aws:kms:us-east-1:1:key/x\n      enc: AQID\n{}",
        &text[..start],
        &text[end..]
    )
    .replacen("  kms: []\n", "", 1);
    let msg = decrypt_file("kms.yaml", kms.as_bytes(), &flux_age())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("encrypted only for cloud key services (kms)"),
        "{msg}"
    );
}

#[test]
fn files_that_are_not_encrypted_are_left_alone() {
    let plain = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n";
    assert_eq!(decrypt_file("x.yaml", plain, &flux_age()), Ok(None));
    assert_eq!(decrypt_file("x.env", b"A=1\n", &flux_age()), Ok(None));
    let mut files = vec![
        SourceFile {
            path: "a/age.yaml".into(),
            data: fixture("flux/age.yaml"),
        },
        SourceFile {
            path: "a/plain.yaml".into(),
            data: plain.to_vec(),
        },
    ];
    decrypt_files(&mut files, &flux_age()).unwrap();
    assert!(String::from_utf8_lossy(&files[0].data).contains("\"key\":\"value\""));
    assert_eq!(files[1].data, plain);
}

#[test]
fn fluxs_annotation_leaves_an_object_encrypted() {
    let text = String::from_utf8(fixture("flux/age.yaml"))
        .unwrap()
        .replacen(
            "  name: age\n",
            "  name: age\n  annotations: {kustomize.toolkit.fluxcd.io/decrypt: disabled}\n",
            1,
        );
    assert_eq!(
        decrypt_file("age.yaml", text.as_bytes(), &flux_age()),
        Ok(None)
    );
}

#[test]
fn other_documents_of_a_file_are_kept() {
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: plain}}\n---\n{}",
        String::from_utf8(fixture("flux/age.yaml")).unwrap()
    );
    let plain = decrypt_file("two.yaml", text.as_bytes(), &flux_age())
        .unwrap()
        .unwrap();
    let docs = crate::load::parse_file("two.yaml", &plain).unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].object["metadata"]["name"], "plain");
    assert_eq!(docs[1].object["stringData"]["key"], "value");
}

#[test]
fn keys_are_read_by_flux_names_and_bad_ones_named() {
    let k = keys(&[
        ("identity.agekey", "flux/age.txt"),
        ("flux.asc", "flux/pgp.asc"),
        ("README", "flux/age.yaml"),
    ]);
    assert_eq!(format!("{k:?}"), "Keys(1 age, 1 OpenPGP)");
    let bad: BTreeMap<String, Vec<u8>> =
        [("x.agekey".to_string(), b"AGE-SECRET-KEY-1NOPE".to_vec())].into();
    let msg = Keys::from_secret(&bad).unwrap_err().to_string();
    assert_eq!(
        msg,
        "x.agekey: key 1 is not an age identity (AGE-SECRET-KEY-1…)"
    );
    assert!(!msg.contains("NOPE"));
}

#[test]
fn an_ini_file_decrypts_by_section_and_key() {
    let k = keys(&[("sops.asc", "sops/sops_functional_tests_key.asc")]);
    let plain = decrypt_file("example.ini", &fixture("sops/example.ini"), &k)
        .unwrap()
        .expect("an encrypted file");
    let text = String::from_utf8(plain).unwrap();
    assert!(text.contains("[name]\n"), "{text}");
    assert!(text.contains("notsecret_unencrypted = hi there!"), "{text}");
    assert!(!text.contains("ENC[") && !text.contains("[sops]"), "{text}");
    // A value moved to another section no longer opens: its path is in the data.
    let moved = String::from_utf8(fixture("sops/example.ini"))
        .unwrap()
        .replacen("[address]", "[moved]", 1);
    let msg = decrypt_file("example.ini", moved.as_bytes(), &k)
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("example.ini: moved.city: "), "{msg}");
    let msg = decrypt_file("app.ini", b"[sops]\nmac = x\n", &flux_age())
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("app.ini: "), "{msg}");
}

#[test]
fn oversized_files_are_refused() {
    let mut big = fixture("flux/age.yaml");
    big.resize(MAX_FILE + 1, b' ');
    let msg = decrypt_file("big.yaml", &big, &flux_age())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("over skewer's limit"), "{msg}");
}

#[test]
fn dotenv_metadata_unflattens_as_sops_flattens_it() {
    let mut meta = serde_json::Map::new();
    unflatten(&mut meta, "age__list_0__map_recipient", "r".into());
    unflatten(&mut meta, "age__list_0__map_enc", "e".into());
    unflatten(&mut meta, "age__list_1__map_enc", "f".into());
    unflatten(&mut meta, "mac_only_encrypted", "true".into());
    unflatten(&mut meta, "unencrypted_suffix", "_unencrypted".into());
    assert_eq!(
        Value::Object(meta),
        serde_json::json!({
            "age": [{"recipient": "r", "enc": "e"}, {"enc": "f"}],
            "mac_only_encrypted": true,
            "unencrypted_suffix": "_unencrypted",
        })
    );
}
