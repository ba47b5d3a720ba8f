//! Issue 13: the container image. `image/build.sh` assembles it without a container engine and
//! pushes it to a real registry on loopback; the test pulls it back as a runtime would and runs
//! its programs in its own root filesystem, as the user the image names.

use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use skewer_e2e::registry::Registry;
use skewer_e2e::{root, skewer_bin};

fn run(cmd: &mut Command) -> Result<std::process::Output> {
    let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

#[test]
fn the_image_is_built_without_an_engine_pushed_and_runs_as_non_root() -> Result<()> {
    let registry = Registry::start()?;
    let work = tempfile::tempdir()?;
    let layout = work.path().join("layout");
    let tag = skewer_api::manifests::DEFAULT_IMAGE;
    let pushed = format!("docker://{}/skewer-dev/skewer:test", registry.host);
    run(Command::new("bash")
        .arg(root().join("image/build.sh"))
        .arg("--binary")
        .arg(skewer_bin())
        .args(["--tag", tag, "--out"])
        .arg(&layout)
        .args(["--push", &pushed, "--insecure"]))?;

    // deploy/ names the tag the image is built under.
    let deploy = std::fs::read_to_string(root().join("deploy/deployment.yaml"))?;
    assert!(
        deploy.contains(&format!("image: {tag}")),
        "deploy/ names another image"
    );

    // The config a runtime reads: non-root, skewer's entrypoint.
    let out =
        run(Command::new("skopeo").args(["inspect", "--tls-verify=false", "--config", &pushed]))?;
    let config: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"][0], "/usr/local/bin/skewer");
    assert_eq!(config["config"]["Cmd"][0], "run");

    // Pulled back from the registry, unpacked as a runtime would.
    let pulled = work.path().join("pulled");
    run(Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false", &pushed])
        .arg(format!("dir:{}", pulled.display())))?;
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pulled.join("manifest.json"))?)?;
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .and_then(|d| d.strip_prefix("sha256:"))
        .context("a layer")?;
    let rootfs = work.path().join("rootfs");
    std::fs::create_dir(&rootfs)?;
    run(Command::new("tar")
        .arg("-xzf")
        .arg(pulled.join(layer))
        .arg("-C")
        .arg(&rootfs))?;
    for file in [
        "usr/local/bin/skewer",
        "usr/bin/ssh",
        "etc/ssl/certs/ca-certificates.crt",
    ] {
        assert!(rootfs.join(file).is_file(), "{file} is not in the image");
    }
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd"))?;
    assert!(passwd.contains("skewer:x:65532:65532:"), "{passwd}");

    // Its programs run from its own files alone (every library they load is in the image),
    // as its non-root user.
    if !is_root() {
        println!("not root: the image's programs were not run in a chroot");
        return Ok(());
    }
    // The runtime provides /dev; ssh opens /dev/null.
    std::fs::create_dir_all(rootfs.join("dev"))?;
    run(Command::new("mknod")
        .arg(rootfs.join("dev/null"))
        .args(["c", "1", "3"]))?;
    run(Command::new("chmod")
        .arg("666")
        .arg(rootfs.join("dev/null")))?;
    let chroot = |program: &str, arg: &str| -> Result<std::process::Output> {
        run(Command::new("chroot")
            .arg("--userspec=65532:65532")
            .arg(&rootfs)
            .args([program, arg])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
    };
    let version = chroot("/usr/local/bin/skewer", "--version")?;
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("skewer {}", env!("CARGO_PKG_VERSION"))
    );
    let ssh = chroot("/usr/bin/ssh", "-V")?;
    assert!(
        String::from_utf8_lossy(&ssh.stderr).contains("OpenSSH"),
        "{ssh:?}"
    );
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
