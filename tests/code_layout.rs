//! The list a release build lays its code out by (`scripts/idle-functions.txt`, read by
//! `scripts/link-kustos.sh`) names functions of this code: a list gone stale (renamed modules,
//! new dependencies) would leave the idle server's code spread again without anything failing.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

/// Listed names found among the executable's functions, at least. The list comes from a release
/// build and this test reads the test build's executable, whose functions are the same code but
/// not the same set: an optimised build inlines functions away, a debug build keeps more of
/// them and fewer copies that LLVM made. The debug build of the commit that wrote the list
/// matched 97 % of it (the release build 100 %).
const MATCHED_AT_LEAST: f64 = 0.90;

fn idle_function_list(root: &Path) -> String {
    std::fs::read_to_string(root.join("scripts/idle-functions.txt")).expect("reading scripts/idle-functions.txt")
}

#[test]
fn the_idle_function_list_names_functions_of_this_executable() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let list = idle_function_list(root);
    let listed: Vec<&str> = list.lines().filter(|l| !l.is_empty()).collect();
    assert!(listed.len() > 1000, "the list has {} names; scripts/idle-functions.sh writes it", listed.len());

    let out = Command::new(root.join("scripts/link-kustos.sh"))
        .arg("--names")
        .arg(env!("CARGO_BIN_EXE_kustos"))
        .output()
        .expect("running scripts/link-kustos.sh --names (it needs nm and c++filt from binutils)");
    assert!(out.status.success(), "scripts/link-kustos.sh --names failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("names are UTF-8");
    let have: HashSet<&str> = text.lines().filter_map(|l| l.split('\t').next()).collect();
    assert!(have.len() > 10_000, "only {} function names read from the executable", have.len());

    let missing: Vec<&str> = listed.iter().copied().filter(|n| !have.contains(n)).collect();
    let matched = (listed.len() - missing.len()) as f64 / listed.len() as f64;
    assert!(
        matched >= MATCHED_AT_LEAST,
        "{:.1} % of scripts/idle-functions.txt's {} names are functions of this executable (at least {:.0} % \
         expected): run scripts/idle-functions.sh. The first missing: {:#?}",
        matched * 100.0,
        listed.len(),
        MATCHED_AT_LEAST * 100.0,
        &missing[..missing.len().min(10)]
    );
}

/// The wrapper places listed functions ahead of the others when it links a release build of
/// the executable, and links everything else as asked: a C program of three functions, one of
/// them named in the list, linked through it as `release/deps/kustos-*` and as another output.
#[test]
fn the_linker_wrapper_places_listed_functions_first_in_a_release_executable() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let list = idle_function_list(root);
    let listed = "sqlite3VdbeExec";
    assert!(list.lines().any(|l| l == listed), "{listed} is no longer in the list; pick another C function of it");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let source = dir.path().join("p.c");
    // Defined in this order, so a plain link puts the listed function last. The table of
    // pointers gives the position-independent executable relative relocations to pack.
    let text = format!(
        "int cold_one(int x) {{ return x * 3 + 1; }}\nint cold_two(int x) {{ return x * 5 + 2; }}\n\
         int {listed}(int x) {{ return x * 7 + 3; }}\n\
         int (* volatile table[3])(int) = {{ cold_one, cold_two, {listed} }};\n\
         int main(int c, char **v) {{ (void)v; int s = 0; for (int i = 0; i < 3; i++) s += table[i](c); return s; }}\n"
    );
    std::fs::write(&source, text).expect("writing the C source");
    let object = dir.path().join("p.o");
    let compiled = Command::new("cc")
        .args(["-c", "-O1", "-ffunction-sections", "-fno-inline", "-o"])
        .arg(&object)
        .arg(&source)
        .status()
        .expect("running cc");
    assert!(compiled.success(), "compiling the C program");
    // The linker rustc uses here: lld from the toolchain's gcc-ld directory.
    let sysroot = Command::new("rustc").args(["--print", "sysroot"]).output().expect("running rustc --print sysroot");
    let sysroot = String::from_utf8(sysroot.stdout).expect("a UTF-8 sysroot");
    let gcc_ld = Path::new(sysroot.trim()).join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld");

    let address_of = |out: &Path, name: &str| -> u64 {
        let nm = Command::new("nm").arg(out).output().expect("running nm");
        let text = String::from_utf8_lossy(&nm.stdout).into_owned();
        text.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (addr, _kind, sym) = (f.next()?, f.next()?, f.next()?);
                (sym == name).then(|| u64::from_str_radix(addr, 16).ok()).flatten()
            })
            .unwrap_or_else(|| panic!("{name} not found in {}", out.display()))
    };
    // Through the wrapper, with the environment given (besides this process's).
    let link_with = |out: &Path, env: &[(&str, String)]| {
        std::fs::create_dir_all(out.parent().expect("a parent")).expect("creating the output directory");
        let status = Command::new(root.join("scripts/link-kustos.sh"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg(format!("-B{}", gcc_ld.display()))
            .arg("-fuse-ld=lld")
            .arg(&object)
            .arg("-o")
            .arg(out)
            .status()
            .expect("running scripts/link-kustos.sh");
        assert!(status.success(), "linking {}", out.display());
    };
    let link = |out: &Path| link_with(out, &[]);

    let ordered = dir.path().join("target/release/deps/kustos-0123456789abcdef");
    link(&ordered);
    let (hot, cold) = (address_of(&ordered, listed), address_of(&ordered, "cold_one"));
    assert!(hot < cold, "in the release executable {listed} ({hot:#x}) comes before cold_one ({cold:#x})");

    let plain = dir.path().join("target/debug/deps/kustos-0123456789abcdef");
    link(&plain);
    let (hot, cold) = (address_of(&plain, listed), address_of(&plain, "cold_one"));
    assert!(hot > cold, "any other output is linked as asked: {listed} ({hot:#x}) after cold_one ({cold:#x})");

    // Relative relocations: packed in the release executable where this glibc reads them
    // (2.36 and later), as they come everywhere else; both run and call through the table.
    let readelf = |args: &[&str], out: &Path| -> String {
        let o = Command::new("readelf").args(args).arg(out).output().expect("running readelf (binutils)");
        assert!(o.status.success(), "readelf {args:?} {}", out.display());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(
        readelf(&["-rW"], &plain).contains("R_X86_64_RELATIVE"),
        "the plain link has relative relocations (the table), so the packed one has something to pack"
    );
    assert!(!readelf(&["-SW"], &plain).contains(" .relr.dyn "), "the plain link is not packed");
    let packs = glibc_reads_packed_relocations();
    let sections = readelf(&["-SW"], &ordered);
    assert_eq!(sections.contains(" .relr.dyn "), packs, "release executable packed iff glibc >= 2.36:\n{sections}");
    assert_eq!(
        readelf(&["-VW"], &ordered).contains("GLIBC_ABI_DT_RELR"),
        packs,
        "a packed executable needs GLIBC_ABI_DT_RELR, an unpacked one does not"
    );
    for out in [&ordered, &plain] {
        let code = Command::new(out).status().expect("running the linked program").code();
        assert_eq!(code, Some(4 + 7 + 10), "{} ran with its table relocated", out.display());
    }

    // KUSTOS_LINK_RELR=0: ordered, not packed.
    let unpacked = dir.path().join("other/release/deps/kustos-0123456789abcdef");
    link_with(&unpacked, &[("KUSTOS_LINK_RELR", "0".to_string())]);
    assert!(!readelf(&["-SW"], &unpacked).contains(" .relr.dyn "), "KUSTOS_LINK_RELR=0 does not pack");
    let (hot, cold) = (address_of(&unpacked, listed), address_of(&unpacked, "cold_one"));
    assert!(hot < cold, "KUSTOS_LINK_RELR=0 still orders: {listed} ({hot:#x}) before cold_one ({cold:#x})");

    // A packed link without the version need is not kept: a readelf that shows packed
    // relocations and no GLIBC_ABI_DT_RELR stands in for a linker that packed without it.
    let fake = dir.path().join("fake-bin");
    std::fs::create_dir_all(&fake).expect("creating the fake readelf's directory");
    let fake_readelf = fake.join("readelf");
    std::fs::write(
        &fake_readelf,
        "#!/bin/sh\ncase \"$1\" in -SW) echo '  [10] .relr.dyn RELR' ;; *) echo 'no version needs' ;; esac\n",
    )
    .expect("writing the fake readelf");
    std::fs::set_permissions(&fake_readelf, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("making the fake readelf executable");
    let guarded = dir.path().join("guarded/release/deps/kustos-0123456789abcdef");
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap_or_default());
    link_with(&guarded, &[("PATH", path)]);
    assert!(!readelf(&["-SW"], &guarded).contains(" .relr.dyn "), "a packed link without the version need is dropped");
    let (hot, cold) = (address_of(&guarded, listed), address_of(&guarded, "cold_one"));
    assert!(hot < cold, "and the executable is linked ordered: {listed} ({hot:#x}) before cold_one ({cold:#x})");
    let code = Command::new(&guarded).status().expect("running the linked program").code();
    assert_eq!(code, Some(4 + 7 + 10), "{} ran with its table relocated", guarded.display());
}

/// Whether this machine's glibc reads packed relative relocations (DT_RELR, glibc 2.36).
fn glibc_reads_packed_relocations() -> bool {
    let out = Command::new("getconf").arg("GNU_LIBC_VERSION").output().expect("running getconf GNU_LIBC_VERSION");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version =
        text.trim().strip_prefix("glibc ").unwrap_or_else(|| panic!("getconf GNU_LIBC_VERSION said {text:?}"));
    let mut parts =
        version.split('.').map(|p| p.parse::<u32>().unwrap_or_else(|_| panic!("glibc version {version:?}")));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}
