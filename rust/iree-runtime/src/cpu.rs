//! Whether this machine's CPU can run a module's llvm-cpu code: code compiled for features the CPU lacks stops
//! the process with SIGILL in the first call that reaches it, and IREE 3.13 loads such a module without a word.
//!
//! The target is read as text. The FlatBuffer holds the executables as opaque rodata blobs (ELF files, which do not
//! record the CPU features they were compiled for); the compiler also writes the device's target attribute,
//! printed, into the module's own error message for a missing device (`HAL device `__device_0` not found or
//! unavailable: #hal.device.target<"local", [#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu = …,
//! cpu_features = "…", …}>]>`). That attribute is the one every executable variant was compiled with, so its
//! `cpu_features` are exactly the features the code may use. A module without that text (none tapeout's compile
//! writes) is not checked; bytes that merely look like it would have to spell out an llvm-cpu target attribute.

use crate::error::IreeError;

/// How an llvm-cpu target attribute starts in a module's text.
const TARGET: &[u8] = b"#hal.executable.target<\"llvm-cpu\", \"";
/// How far past the attribute's start its `cpu` and `cpu_features` are looked for: they are its first keys
/// (MLIR prints a dictionary's keys sorted), and LLVM's whole x86 feature list is under 4 KiB.
const WINDOW: usize = 16 << 10;

/// One llvm-cpu executable target a module was compiled for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuTarget {
    /// The executable format (`embedded-elf-x86_64`, `embedded-elf-arm_64`, ...).
    pub format: String,
    /// LLVM's CPU name (`generic`, `znver4`, `sapphirerapids`, ...).
    pub cpu: String,
    /// The features enabled (`+name`), in LLVM's names; a feature listed twice counts as its last mention.
    pub features: Vec<String>,
}

impl CpuTarget {
    /// Whether it runs on an x86-64 CPU.
    pub fn is_x86_64(&self) -> bool {
        self.format.ends_with("x86_64")
    }
}

/// What this machine's CPU lacks of a target's features.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFit {
    /// Enabled features the CPU does not have.
    pub missing: Vec<String>,
    /// Enabled features this runtime cannot test for (LLVM names a CPUID bit it has no detection for).
    pub unchecked: Vec<String>,
}

/// The llvm-cpu targets named in a module's bytes, each once, in the order first seen.
pub fn cpu_targets(vmfb: &[u8]) -> Vec<CpuTarget> {
    let mut targets: Vec<CpuTarget> = Vec::new();
    let mut from = 0;
    while let Some(found) = find(vmfb.get(from..).unwrap_or(&[]), TARGET) {
        let start = from + found + TARGET.len();
        from = start;
        let window = vmfb.get(start..vmfb.len().min(start.saturating_add(WINDOW))).unwrap_or(&[]);
        let Some(format) = quoted(window, 0) else { continue };
        // Only this attribute's own keys: stop at the next target in the same list.
        let own = find(window, b"#hal.executable.target<").map_or(window, |end| window.get(..end).unwrap_or(&[]));
        let cpu = key(own, "cpu").unwrap_or_default();
        let features = key(own, "cpu_features").map(|list| enabled(&list)).unwrap_or_default();
        let target = CpuTarget { format, cpu, features };
        if !targets.contains(&target) {
            targets.push(target);
        }
    }
    targets
}

/// The first index of `needle` (not empty) in `hay`: a scan for its first byte, then a compare (a module can
/// be gigabytes of inline constants).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while let Some(at) = hay.get(from..)?.iter().position(|&b| b == first) {
        if hay.get(from + at..)?.starts_with(needle) {
            return Some(from + at);
        }
        from += at + 1;
    }
    None
}

/// The text from `at` up to the next `"` (printed MLIR escapes none in these values).
fn quoted(bytes: &[u8], at: usize) -> Option<String> {
    let rest = bytes.get(at..)?;
    let end = rest.iter().position(|&b| b == b'"')?;
    String::from_utf8(rest.get(..end)?.to_vec()).ok()
}

/// The string value of dictionary key `name` (`{name = "…"` or `, name = "…"`).
fn key(dict: &[u8], name: &str) -> Option<String> {
    for lead in ["{", ", "] {
        let pattern = format!("{lead}{name} = \"");
        if let Some(at) = find(dict, pattern.as_bytes()) {
            return quoted(dict, at + pattern.len());
        }
    }
    None
}

/// The features a `+a,-b,+c` list leaves enabled: LLVM applies them in order, so the last mention wins (IREE's
/// host detection lists some twice, `+mwaitx` then `-mwaitx`).
fn enabled(list: &str) -> Vec<String> {
    let mut on: Vec<String> = Vec::new();
    for item in list.split(',').map(str::trim) {
        if let Some(name) = item.strip_prefix('+') {
            if !on.iter().any(|f| f == name) {
                on.push(name.to_owned());
            }
        } else if let Some(name) = item.strip_prefix('-') {
            on.retain(|f| f != name);
        }
    }
    on
}

/// What this machine's CPU lacks of `target`'s features (nothing for a target that is not x86-64: IREE itself
/// refuses a format the device cannot load).
pub fn host_fit(target: &CpuTarget) -> HostFit {
    let mut fit = HostFit::default();
    if !target.is_x86_64() {
        return fit;
    }
    if target.features.is_empty() && !matches!(target.cpu.as_str(), "" | "generic" | "x86-64") {
        // LLVM then uses the CPU's own feature set, which only LLVM's tables know.
        fit.unchecked.push(format!("the features of cpu '{}'", target.cpu));
    }
    for feature in &target.features {
        match host_has(feature) {
            Some(true) => {}
            Some(false) => fit.missing.push(feature.clone()),
            None => fit.unchecked.push(feature.clone()),
        }
    }
    fit
}

/// Refuses a module with an x86-64 llvm-cpu target this CPU cannot run, for a CPU (`local-*`) device. Every such
/// target must fit: IREE picks among variants of one format by order, not by the CPU's features.
pub(crate) fn check_host(vmfb: &[u8], device: &str) -> Result<(), IreeError> {
    if !device.starts_with("local") {
        return Ok(());
    }
    for target in cpu_targets(vmfb) {
        let fit = host_fit(&target);
        if !fit.missing.is_empty() {
            return Err(IreeError::MissingCpuFeatures {
                device: device.to_owned(),
                cpu: target.cpu,
                missing: fit.missing,
                unchecked: fit.unchecked,
            });
        }
    }
    Ok(())
}

/// Whether this CPU has LLVM's x86 feature `name` (CPUID, and the OS's saving of the registers it needs, as
/// `is_x86_feature_detected!` checks); `None` for a feature with no detection here.
#[cfg(target_arch = "x86_64")]
fn host_has(name: &str) -> Option<bool> {
    macro_rules! has {
        ($f:tt) => {
            Some(std::arch::is_x86_feature_detected!($f))
        };
    }
    match name {
        // The x86-64 baseline: every CPU that runs this 64-bit process has them.
        "64bit" | "cmov" | "cx8" | "x87" | "mmx" | "sse" | "sse2" | "fxsr" => Some(true),
        // CRC32 is part of SSE4.2 (CPUID.1:ECX.SSE4_2).
        "crc32" | "sse4.2" => has!("sse4.2"),
        "sse3" => has!("sse3"),
        "ssse3" => has!("ssse3"),
        "sse4.1" => has!("sse4.1"),
        "sse4a" => has!("sse4a"),
        "avx" => has!("avx"),
        "avx2" => has!("avx2"),
        "fma" => has!("fma"),
        "f16c" => has!("f16c"),
        "bmi" => has!("bmi1"),
        "bmi2" => has!("bmi2"),
        "lzcnt" => has!("lzcnt"),
        "popcnt" => has!("popcnt"),
        "tbm" => has!("tbm"),
        // XOP's detection is unstable in std: its CPUID bit, and AVX's for the OS saving the YMM registers.
        "xop" => Some(cpuid(0x8000_0001, 0, Reg::Ecx, 11) && std::arch::is_x86_feature_detected!("avx")),
        "aes" => has!("aes"),
        "pclmul" => has!("pclmulqdq"),
        "vaes" => has!("vaes"),
        "vpclmulqdq" => has!("vpclmulqdq"),
        "gfni" => has!("gfni"),
        "sha" => has!("sha"),
        // Detected by std only since Rust 1.89 (this crate builds with 1.85): their CPUID bits, and the OS's
        // saving of the registers they use as std's AVX / AVX-512 detection reports it.
        "sha512" => Some(cpuid(7, 1, Reg::Eax, 0) && avx()),
        "sm3" => Some(cpuid(7, 1, Reg::Eax, 1) && avx()),
        "sm4" => Some(cpuid(7, 1, Reg::Eax, 2) && avx()),
        "rdrnd" => has!("rdrand"),
        "rdseed" => has!("rdseed"),
        "adx" => has!("adx"),
        "movbe" => has!("movbe"),
        "cx16" => has!("cmpxchg16b"),
        "rtm" => has!("rtm"),
        "ermsb" => has!("ermsb"),
        "xsave" => has!("xsave"),
        "xsaveopt" => has!("xsaveopt"),
        "xsavec" => has!("xsavec"),
        "xsaves" => has!("xsaves"),
        "avx512f" => has!("avx512f"),
        "avx512cd" => has!("avx512cd"),
        "avx512bw" => has!("avx512bw"),
        "avx512dq" => has!("avx512dq"),
        "avx512vl" => has!("avx512vl"),
        "avx512ifma" => has!("avx512ifma"),
        "avx512vbmi" => has!("avx512vbmi"),
        "avx512vbmi2" => has!("avx512vbmi2"),
        "avx512vnni" => has!("avx512vnni"),
        "avx512bitalg" => has!("avx512bitalg"),
        "avx512vpopcntdq" => has!("avx512vpopcntdq"),
        "avx512bf16" => has!("avx512bf16"),
        "avx512fp16" => Some(cpuid(7, 0, Reg::Edx, 23) && std::arch::is_x86_feature_detected!("avx512f")),
        "avx512vp2intersect" => has!("avx512vp2intersect"),
        "avxvnni" => Some(cpuid(7, 1, Reg::Eax, 4) && avx()),
        "avxifma" => Some(cpuid(7, 1, Reg::Eax, 23) && avx()),
        "avxneconvert" => Some(cpuid(7, 1, Reg::Edx, 5) && avx()),
        "avxvnniint8" => Some(cpuid(7, 1, Reg::Edx, 4) && avx()),
        "avxvnniint16" => Some(cpuid(7, 1, Reg::Edx, 10) && avx()),
        // AMX's detection is unstable in std, and Linux also wants a per-process permission for its registers:
        // a missing CPUID bit is certain, a present one is not enough.
        "amx-tile" => unless_absent(cpuid(7, 0, Reg::Edx, 24)),
        "amx-int8" => unless_absent(cpuid(7, 0, Reg::Edx, 25)),
        "amx-bf16" => unless_absent(cpuid(7, 0, Reg::Edx, 22)),
        "amx-fp16" => unless_absent(cpuid(7, 1, Reg::Eax, 21)),
        "amx-complex" => unless_absent(cpuid(7, 1, Reg::Edx, 8)),
        // User-mode instructions that need no OS support: their CPUID bits alone say whether they run.
        "sahf" => Some(cpuid(0x8000_0001, 0, Reg::Ecx, 0)),
        "prfchw" => Some(cpuid(0x8000_0001, 0, Reg::Ecx, 8)),
        "mwaitx" => Some(cpuid(0x8000_0001, 0, Reg::Ecx, 29)),
        "clzero" => Some(cpuid(0x8000_0008, 0, Reg::Ebx, 0)),
        "rdpru" => Some(cpuid(0x8000_0008, 0, Reg::Ebx, 4)),
        "clflushopt" => Some(cpuid(7, 0, Reg::Ebx, 23)),
        "clwb" => Some(cpuid(7, 0, Reg::Ebx, 24)),
        "waitpkg" => Some(cpuid(7, 0, Reg::Ecx, 5)),
        "rdpid" => Some(cpuid(7, 0, Reg::Ecx, 22)),
        "cldemote" => Some(cpuid(7, 0, Reg::Ecx, 25)),
        "movdiri" => Some(cpuid(7, 0, Reg::Ecx, 27)),
        "movdir64b" => Some(cpuid(7, 0, Reg::Ecx, 28)),
        "serialize" => Some(cpuid(7, 0, Reg::Edx, 14)),
        "cmpccxadd" => Some(cpuid(7, 1, Reg::Eax, 7)),
        "prefetchi" => Some(cpuid(7, 1, Reg::Edx, 14)),
        // Key Locker also needs the OS to have enabled it (CR4.KL): a present bit is not enough.
        "kl" => unless_absent(cpuid(7, 0, Reg::Ecx, 23)),
        "widekl" => unless_absent(cpuid(0x19, 0, Reg::Ebx, 2)),
        _ => None,
    }
}

/// A feature that also needs the OS's consent: certainly missing without its CPUID bit, unchecked with it.
#[cfg(target_arch = "x86_64")]
fn unless_absent(bit: bool) -> Option<bool> {
    if bit { None } else { Some(false) }
}

/// Whether the CPU has AVX and the OS saves the YMM registers (what every VEX-encoded extension needs).
#[cfg(target_arch = "x86_64")]
fn avx() -> bool {
    std::arch::is_x86_feature_detected!("avx")
}

#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
enum Reg {
    Eax,
    Ebx,
    Ecx,
    Edx,
}

/// CPUID leaf `leaf`, subleaf `sub`: bit `bit` of `reg`; false where the CPU does not have the leaf.
#[cfg(target_arch = "x86_64")]
fn cpuid(leaf: u32, sub: u32, reg: Reg, bit: u32) -> bool {
    use std::arch::x86_64::__cpuid_count;
    // CPUID is in every x86-64 CPU; a leaf above the highest one it reports returns unrelated data, so check first.
    #[allow(unused_unsafe)] // __cpuid_count is safe in newer Rust
    // SAFETY: CPUID has no side effects and exists on every x86-64 CPU.
    let (max, max_sub) = unsafe {
        let top = __cpuid_count(leaf & 0x8000_0000, 0).eax;
        (top, if leaf == 7 { __cpuid_count(7, 0).eax } else { 0 })
    };
    if leaf > max || sub > max_sub {
        return false;
    }
    #[allow(unused_unsafe)]
    // SAFETY: as above; the leaf and subleaf exist.
    let r = unsafe { __cpuid_count(leaf, sub) };
    let value = match reg {
        Reg::Eax => r.eax,
        Reg::Ebx => r.ebx,
        Reg::Ecx => r.ecx,
        Reg::Edx => r.edx,
    };
    value >> bit & 1 == 1
}

/// Elsewhere than x86-64 no x86 feature is checked (an x86-64 module does not load here at all).
#[cfg(not(target_arch = "x86_64"))]
fn host_has(_name: &str) -> Option<bool> {
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use super::{CpuTarget, cpu_targets, enabled, host_fit};
    use crate::Instance;
    use crate::error::IreeError;
    use crate::test_support::{ADD, CPU, compile};

    fn target(format: &str, cpu: &str, features: &[&str]) -> CpuTarget {
        CpuTarget { format: format.into(), cpu: cpu.into(), features: features.iter().map(|&f| f.into()).collect() }
    }

    #[test]
    fn the_last_mention_of_a_feature_wins() {
        assert_eq!(enabled("+a,-b,+c,-a,+b"), ["c", "b"]);
        assert_eq!(enabled(""), Vec::<String>::new());
    }

    #[test]
    fn targets_are_read_from_the_printed_device_attribute() {
        let text = br#"junk HAL device `__device_0` not found or unavailable: #hal.device.target<"local", [#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu = "znver4", cpu_features = "+avx,+avx512fp16,-avx", data_layout = "e"}>, #hal.executable.target<"llvm-cpu", "embedded-elf-arm_64", {cpu = "generic", data_layout = "e"}>]> more #hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu = "znver4", cpu_features = "+avx,+avx512fp16,-avx""#;
        assert_eq!(
            cpu_targets(text),
            [target("embedded-elf-x86_64", "znver4", &["avx512fp16"]), target("embedded-elf-arm_64", "generic", &[])]
        );
        // A truncated attribute, and bytes without one.
        assert_eq!(cpu_targets(br#"#hal.executable.target<"llvm-cpu", "embedded-elf"#), []);
        assert_eq!(cpu_targets(b"no target here"), []);
        // Not x86-64: IREE's own format check answers.
        assert_eq!(host_fit(&target("embedded-elf-arm_64", "neoverse-v2", &["sve2"])), Default::default());
        let fit = host_fit(&target("embedded-elf-x86_64", "sapphirerapids", &[]));
        assert_eq!(fit.unchecked, ["the features of cpu 'sapphirerapids'"]);
        let fit = host_fit(&target("embedded-elf-x86_64", "x", &["sse2", "no-such-feature"]));
        assert_eq!((fit.missing.len(), fit.unchecked), (0, vec!["no-such-feature".to_owned()]));
    }

    /// LLVM's host detection (what `--iree-llvmcpu-target-cpu=host` writes) agrees with CPUID: a module compiled
    /// for this machine is never refused on it.
    #[test]
    fn a_module_compiled_for_this_host_fits_it_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let vmfb = compile(dir.path(), "host", ADD, &[CPU[0], CPU[1], "--iree-llvmcpu-target-cpu=host"]);
        let targets = cpu_targets(&vmfb);
        assert_eq!(targets.len(), 1, "{targets:?}");
        let fit = host_fit(&targets[0]);
        assert!(fit.missing.is_empty(), "{:?} (cpu {})", fit.missing, targets[0].cpu);
        eprintln!("cpu {}: {} features, not checked: {:?}", targets[0].cpu, targets[0].features.len(), fit.unchecked);
        let device = Instance::new().unwrap().device("local-sync", 0).unwrap();
        device.load(&vmfb, &[]).unwrap();
        // The portable baseline has no features to check.
        let generic = compile(dir.path(), "generic", ADD, CPU);
        assert!(cpu_targets(&generic).iter().all(|t| host_fit(t) == Default::default()));
    }

    /// A module for a feature this CPU lacks is refused before IREE runs it (it would die of SIGILL).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_module_needing_a_feature_this_cpu_lacks_is_refused_naming_it() {
        if std::arch::is_x86_feature_detected!("avx512fp16") {
            eprintln!("skipped: this CPU has avx512fp16, so no module here needs what it lacks");
            return;
        }
        // f16 arithmetic compiled for a CPU with AVX512-FP16 (vmulph/vaddph), which iree-run-module dies on here
        // (SIGILL).
        let f16 = "func.func @main(%a: tensor<64xf16>, %b: tensor<64xf16>) -> tensor<64xf16> {
  %0 = stablehlo.multiply %a, %b : tensor<64xf16>
  %1 = stablehlo.add %0, %b : tensor<64xf16>
  return %1 : tensor<64xf16>
}";
        let dir = tempfile::tempdir().unwrap();
        let vmfb = compile(dir.path(), "fp16", f16, &[CPU[0], CPU[1], "--iree-llvmcpu-target-cpu=sapphirerapids"]);
        let instance = Instance::new().unwrap();
        let e = instance.device("local-task", 1).unwrap().load(&vmfb, &[]).unwrap_err();
        let IreeError::MissingCpuFeatures { missing, cpu, device, .. } = &e else { panic!("{e:?}") };
        assert!(missing.contains(&"avx512fp16".to_owned()), "{missing:?}");
        assert_eq!((cpu.as_str(), device.as_str()), ("sapphirerapids", "local-task"));
        let text = e.to_string();
        for needle in ["avx512fp16", "SIGILL", "--iree-llvmcpu-target-cpu=host", "'sapphirerapids'"] {
            assert!(text.contains(needle), "{needle:?} not in: {text}");
        }
        eprintln!("{text}");
    }

    /// Another architecture's module is not this check's business: IREE's own format check answers.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn an_aarch64_module_is_left_to_iree_which_says_wrong_target() {
        let dir = tempfile::tempdir().unwrap();
        let vmfb = compile(dir.path(), "arm", ADD, &[CPU[0], CPU[1], "--iree-llvmcpu-target-triple=aarch64-linux-gnu"]);
        assert!(cpu_targets(&vmfb).iter().any(|t| t.format == "embedded-elf-arm_64"), "{:?}", cpu_targets(&vmfb));
        let e = Instance::new().unwrap().device("local-task", 1).unwrap().load(&vmfb, &[]).unwrap_err();
        assert!(matches!(&e, IreeError::WrongTarget { device, .. } if device == "local-task"), "{e:?}");
    }

    /// Where /proc/cpuinfo lists a feature, CPUID has it (the kernel may hide some, never invent them).
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn cpuid_bits_agree_with_proc_cpuinfo() {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags: Vec<&str> = info.lines().find(|l| l.starts_with("flags")).unwrap().split_whitespace().collect();
        let pairs = [
            ("lahf_lm", "sahf"),
            ("3dnowprefetch", "prfchw"),
            ("clflushopt", "clflushopt"),
            ("clwb", "clwb"),
            ("rdpid", "rdpid"),
            ("clzero", "clzero"),
            ("mwaitx", "mwaitx"),
            ("movdiri", "movdiri"),
            ("movdir64b", "movdir64b"),
            ("serialize", "serialize"),
            ("cldemote", "cldemote"),
            ("waitpkg", "waitpkg"),
            ("avx512_fp16", "avx512fp16"),
            ("avx512_bf16", "avx512bf16"),
            ("avx_vnni", "avxvnni"),
            ("avx_ifma", "avxifma"),
            ("avx_ne_convert", "avxneconvert"),
            ("avx_vnni_int8", "avxvnniint8"),
            ("avx_vnni_int16", "avxvnniint16"),
            ("sha512", "sha512"),
            ("sm3", "sm3"),
            ("sm4", "sm4"),
            ("xop", "xop"),
        ];
        for (linux, llvm) in pairs {
            if flags.contains(&linux) {
                assert_eq!(super::host_has(llvm), Some(true), "{llvm} ({linux} in /proc/cpuinfo)");
            }
        }
        let amx = flags.contains(&"amx_tile");
        assert_eq!(super::host_has("amx-tile"), if amx { None } else { Some(false) });
    }
}
