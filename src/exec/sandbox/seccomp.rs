//! The seccomp filter of sandboxed commands, assembled by hand as classic BPF: built in the
//! parent before the clone, installed in the child. It never kills on a denied call (the call
//! fails with `EPERM`), except for a foreign syscall ABI, whose process is killed.
//!
//! Names are from the kernel UAPI headers `linux/seccomp.h` (`struct seccomp_data`,
//! `SECCOMP_RET_*`), `linux/filter.h` (`BPF_*`) and `linux/audit.h` (`AUDIT_ARCH_*`).

/// `AUDIT_ARCH_X86_64` (`EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
/// `AUDIT_ARCH_AARCH64` (`EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`).
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// `__X32_SYSCALL_BIT`: x32 syscalls on x86_64 carry it in their number.
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;

// Classic BPF opcodes (linux/filter.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
const JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

// Offsets in `struct seccomp_data`: nr (u32), arch (u32), instruction_pointer (u64),
// args[6] (u64 each, native endian: the low half of args[0] is at 16 on little endian).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0_LOW: u32 = 16;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter: `ptrace`, `process_vm_readv/writev` and `io_uring_*` always fail with
/// `EPERM`; with the network off, so do `socket`/`socketpair` of any family but `AF_UNIX`
/// (the only sockets the command can then hold are unix sockets: it inherits no other, as
/// every descriptor but stdio is closed at exec). A foreign architecture in the syscall
/// data (i386 through `int 0x80`) kills the process; x32 calls fail with `EPERM`.
pub(crate) fn program(network_off: bool) -> Vec<libc::sock_filter> {
    let always = [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];
    let mut p = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        p.push(jump(JGE_K, X32_BIT, 0, 1));
        p.push(stmt(RET_K, RET_EPERM));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = JGE_K;
    for nr in always {
        p.push(jump(JEQ_K, nr as u32, 0, 1));
        p.push(stmt(RET_K, RET_EPERM));
    }
    if network_off {
        // socket/socketpair: allow only when the family (args[0]) is AF_UNIX.
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            p.push(jump(JEQ_K, nr as u32, 0, 4));
            p.push(stmt(LD_W_ABS, OFF_ARG0_LOW));
            p.push(jump(JEQ_K, libc::AF_UNIX as u32, 1, 0));
            p.push(stmt(RET_K, RET_EPERM));
            p.push(stmt(RET_K, RET_ALLOW));
        }
    }
    p.push(stmt(RET_K, RET_ALLOW));
    p
}
