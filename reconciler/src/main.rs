//! The `nodewright` binary: see [`nodewright_reconciler::cli`].

// The one unsafe call, the allocator's option setter, allows it below.
#![deny(unsafe_code)]

/// A long-running controller allocates and frees watch objects and snapshots at a high rate;
/// mimalloc keeps that cheap and returns freed memory instead of fragmenting the heap. It is
/// version 2, whose peak at 10,000 nodes holds steady where version 3's now and then rises by
/// a hundred megabytes it never gives back (docs/decisions.md). It is built without
/// transparent huge pages (`no_thp`): objects of a few hundred bytes come and go, and a heap
/// that asks for huge pages has the kernel zero 2 MiB at each fresh touch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option: its position in the option enum of `mimalloc.h`, which
/// mimalloc keeps stable across versions (retired options keep their slots), and its default
/// in version 2.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const PURGE_DELAY_DEFAULT_MS: std::ffi::c_long = 10;

/// How long freed memory stays with a command that ends, or with `sim serve`, before it goes
/// back to the OS. The reconciler runs until stopped under a pod's memory limit, which counts
/// what is resident, and keeps mimalloc's 10 ms at no measurable cost in CPU; a simulated
/// 10,000-node rollout churns far more memory per second and spends half the time in the
/// kernel when freed memory stays a second.
const PURGE_DELAY_KEPT_MS: std::ffi::c_long = 1000;

/// Sets the purge delay unless the environment chose one (`MIMALLOC_PURGE_DELAY`, which
/// mimalloc reads itself) or the option does not read as version 2's default, as it would
/// were the enum ever renumbered.
fn keep_freed_memory_a_while() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: both calls read or write one integer of mimalloc's option table, before the
    // runtime starts any thread; mimalloc reads the option again each time it schedules a
    // purge, so the new value applies from here on.
    unsafe {
        if libmimalloc_sys::mi_option_get(PURGE_DELAY) == PURGE_DELAY_DEFAULT_MS {
            libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_KEPT_MS);
        }
    }
}

fn main() -> std::process::ExitCode {
    nodewright_reconciler::cli::main(|command| {
        if !command.lives_under_a_memory_limit() {
            keep_freed_memory_a_while();
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn freed_memory_goes_back_to_the_os_after_ten_milliseconds_unless_kept_a_second() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        #[allow(unsafe_code)]
        // SAFETY: reads one integer of mimalloc's option table.
        let delay = || unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        assert_eq!(delay(), 10, "the reconciler's delay is mimalloc's own");
        super::keep_freed_memory_a_while();
        assert_eq!(delay(), super::PURGE_DELAY_KEPT_MS);
    }
}
