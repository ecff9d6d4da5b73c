//! Work spread over the machine's cores with results kept in input order.
//!
//! A helper of the render, graph and plan stages. Input: items and a function of one
//! item. Output: the function's results, in the order of the items, whichever thread
//! made each one, so what is made in parallel is byte for byte what a sequential
//! loop makes. On rayon's pool, whose threads live as long as the process: a thread
//! per call (`std::thread::scope`) paid, at each of a plan's ~12 calls, jemalloc's
//! purge of the exiting thread's arena (`madvise` with a TLB shootdown of the other
//! core) and then the page faults of memory made anew: ~5% and ~10% of a 4,096-node
//! plan's CPU time (perf).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `work` applied to every item of `items`, on up to one thread per core; the
/// results in the order of `items`.
pub fn ordered<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    ordered_longest_first(items, &[], work)
}

/// [`ordered`], starting with the items at `longest` (the indexes of the items known
/// to take longest), then the others in order; the results still in the order of
/// `items`. Started last, a long item runs alone on one core while the others idle.
pub fn ordered_longest_first<T: Sync, R: Send>(
    items: &[T],
    longest: &[usize],
    work: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    spread(&schedule(items.len(), longest), |index| work(&items[index]))
}

/// The order `count` items are taken in: those at `longest` first, then the others in order.
fn schedule(count: usize, longest: &[usize]) -> Vec<usize> {
    let first = longest.iter().copied().filter(|&index| index < count);
    first.chain((0..count).filter(|index| !longest.contains(index))).collect()
}

/// `0..count` cut into consecutive runs of `run` positions (the last may be shorter):
/// the items of a large loop that one thread takes at a time.
#[must_use]
pub fn runs(count: usize, run: usize) -> Vec<std::ops::Range<usize>> {
    let run = run.max(1);
    (0..count).step_by(run).map(|start| start..count.min(start + run)).collect()
}

/// `work` applied to consecutive runs of `run` slots of `slots` (its first slot's index
/// and the run), on up to one thread per core, each writing its own slots in place;
/// the runs' results in the order of the runs. What a sequential loop over one large
/// output makes, without a second copy of it to join the runs.
pub fn fill<T: Send, R: Send>(slots: &mut [T], run: usize, work: impl Fn(usize, &mut [T]) -> R + Sync) -> Vec<R> {
    let run = run.max(1);
    // Each run behind its own lock, taken out by the one thread that works on it.
    let runs: Vec<Mutex<Option<&mut [T]>>> = slots.chunks_mut(run).map(|slots| Mutex::new(Some(slots))).collect();
    spread(&(0..runs.len()).collect::<Vec<_>>(), |number| {
        // Always there: `spread` hands each number to one thread once.
        let slots = runs[number].lock().ok().and_then(|mut slots| slots.take())?;
        Some(work(number * run, slots))
    })
    .into_iter()
    .flatten()
    .collect()
}

/// `work` applied to every index of `schedule` (each of `0..schedule.len()` once),
/// taken in that order one at a time from a shared counter by up to one thread per
/// core, so a slow index does not hold back the others behind it; the results by index.
fn spread<R: Send>(schedule: &[usize], work: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let threads = rayon::current_num_threads().min(schedule.len());
    if threads <= 1 {
        return (0..schedule.len()).map(work).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new(schedule.iter().map(|_| None).collect());
    rayon::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|_| {
                while let Some(&index) = schedule.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = work(index);
                    if let Ok(mut results) = results.lock() {
                        results[index] = Some(result);
                    }
                }
            });
        }
    });
    // Every index was taken by exactly one thread, which stored its result; a job
    // that panicked re-raised its panic when the scope ended.
    results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_every_position_once_the_last_shorter() {
        assert_eq!(runs(7, 3), [0..3, 3..6, 6..7]);
        assert_eq!(runs(6, 3), [0..3, 3..6]);
        assert!(runs(0, 3).is_empty());
        assert_eq!(runs(2, 0), [0..1, 1..2], "a run holds one position at least");
    }

    #[test]
    fn results_keep_the_order_of_the_items() {
        let items: Vec<u64> = (0..1000).collect();
        // Uneven work: later items finish first on another thread.
        let results = ordered(&items, |&item| {
            let mut sum = 0u64;
            for step in 0..(1000 - item) * 50 {
                sum = sum.wrapping_add(step);
            }
            (item, sum)
        });
        assert_eq!(results.iter().map(|(item, _)| *item).collect::<Vec<_>>(), items);
        assert!(ordered(&[] as &[u8], |_| 0).is_empty());
    }

    #[test]
    fn runs_fill_their_own_slots_and_results_keep_the_order_of_the_runs() {
        let mut slots = vec![0usize; 1000];
        let starts = fill(&mut slots, 64, |start, run| {
            for (offset, slot) in run.iter_mut().enumerate() {
                *slot = start + offset;
            }
            (start, run.len())
        });
        assert_eq!(slots, (0..1000).collect::<Vec<_>>());
        assert_eq!(starts.len(), 16);
        assert!(starts.iter().enumerate().all(|(number, &(start, _))| start == number * 64));
        assert_eq!(starts.last(), Some(&(960, 40)));
        assert!(fill(&mut [] as &mut [u8], 4, |_, _| 0).is_empty());
    }

    #[test]
    fn the_longest_items_are_taken_first_and_results_keep_the_order_of_the_items() {
        assert_eq!(schedule(6, &[4, 1, 9]), [4, 1, 0, 2, 3, 5], "an index past the items is ignored");
        assert_eq!(schedule(3, &[]), [0, 1, 2]);
        let items: Vec<usize> = (0..6).collect();
        let ran = Mutex::new(Vec::new());
        let results = ordered_longest_first(&items, &[4, 1], |&item| {
            ran.lock().expect("not poisoned").push(item);
            item * 10
        });
        assert_eq!(results, [0, 10, 20, 30, 40, 50]);
        let mut ran = ran.into_inner().expect("not poisoned");
        ran.sort_unstable();
        assert_eq!(ran, items, "every item ran once");
    }
}
