//! Golden files of what people read, for tests.

/// Checks `actual` byte for byte against the golden file `src/testdata/<name>` of the crate
/// the test is in. `SKEWER_BLESS=1 cargo test` rewrites them after a deliberate change (then
/// read the diff).
#[doc(hidden)]
#[macro_export]
macro_rules! golden {
    ($name:expr, $actual:expr) => {
        $crate::golden::check(
            ::std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata"),
            $name,
            $actual,
        )
    };
}

#[doc(hidden)]
pub fn check(dir: std::path::PathBuf, name: &str, actual: &str) {
    let path = dir.join(name);
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
