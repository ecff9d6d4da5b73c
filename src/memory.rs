//! Freed memory handed back to the OS between the stages of a large plan.
//!
//! Stage: any (a helper of `compile`). Each plan stage frees much of what it made
//! (rendered texts kept only for their hash, the id index, dependency lists turned
//! into edges), on the pool's threads, each allocating from its own jemalloc arena.
//! jemalloc keeps freed pages ~10 s for reuse, but the next stage allocates on other
//! threads, so those pages stayed resident and counted in the plan's peak: at 4,096
//! nodes 85.8 MiB with a purge after the render and id lookup only, 75.1 MiB with
//! one after the graph's assembly too (benches/plan_scale.py's blueprint, 9 runs). A
//! purge at every free (`dirty_decay_ms:0`) cost ~20% of a 32,768-node plan's time.

use tikv_jemalloc_ctl::{Access, AsName, arenas};

/// Purges every jemalloc arena's unused dirty pages now, keeping its decay time.
///
/// An arena's decay time set to 0 purges its unused dirty pages at once (writing
/// back the same value does not: tried); the time it had is then restored, so later
/// frees are kept for reuse as before. A no-op where jemalloc is not the allocator in
/// use: its arenas then hold nothing. Errors are ignored: an arena never used has no
/// decay to set, and memory not handed back costs peak memory, never correctness.
pub fn release_freed() {
    let Ok(count) = arenas::narenas::read() else { return };
    for arena in 0..count {
        let name = format!("arena.{arena}.dirty_decay_ms\0");
        let name = name.as_bytes().name();
        if let Ok(decay) = Access::<isize>::read(name) {
            let _ = name.write(0isize);
            let _ = name.write(decay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_keeps_each_arena_s_decay_time() {
        let decay = |arena: u32| Access::<isize>::read(format!("arena.{arena}.dirty_decay_ms\0").as_bytes().name());
        // Arena 0 exists once jemalloc has started, which reading its arena count does.
        assert!(arenas::narenas::read().expect("jemalloc answers") >= 1);
        let before = decay(0).expect("arena 0 is in use");
        release_freed();
        assert_eq!(decay(0).expect("arena 0 is in use"), before);
    }
}
