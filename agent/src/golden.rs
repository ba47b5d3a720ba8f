//! Golden files of what people read, for tests.

/// Golden files: text a person reads, checked byte for byte against `src/testdata/<name>`.
/// `SKEWER_BLESS=1 cargo test` rewrites them after a deliberate change (then read the diff).
#[doc(hidden)]
pub fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/testdata")
        .join(name);
    if std::env::var_os("SKEWER_BLESS").is_some() {
        std::fs::write(&path, actual).expect("writing the golden file");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == actual,
        "{name} differs from its golden file (SKEWER_BLESS=1 rewrites it):\n--- want\n{want}\n--- got\n{actual}"
    );
}
