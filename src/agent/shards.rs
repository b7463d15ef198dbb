//! The threads that run the agent's connections ([`Shards`]): each a
//! single-threaded tokio runtime of its own, at most one per CPU, and each
//! accepted connection runs wholly on one of them.
//!
//! A keystroke's echo passes four tasks of a connection (russh's session,
//! the channel's inbound copy, the command's output pump, russh's session
//! again). On one multi-threaded runtime each wakeup may land on another
//! worker; on a connection's own thread the woken task runs next, on the
//! same CPU. Connections still spread over every CPU.
//!
//! A thread starts when a connection finds none idle, so an agent with one
//! client (the usual: exec_all's connection) has one, not one per CPU.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// How long a shard's leftover tasks (a command still ending after its
/// connection went) may take to end when the shards stop.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(100);

/// One runtime thread and how many connections it runs now.
struct Shard {
    handle: Handle,
    load: Arc<AtomicUsize>,
    thread: JoinHandle<()>,
}

/// The connection threads; stopped (and joined) when dropped.
pub(crate) struct Shards {
    max: usize,
    shards: Mutex<Vec<Shard>>,
    stop: CancellationToken,
}

impl Shards {
    /// Up to `max` threads (at least one), started as connections need them.
    pub(crate) fn new(max: usize) -> Self {
        Shards {
            max: max.max(1),
            shards: Mutex::new(Vec::new()),
            stop: CancellationToken::new(),
        }
    }

    /// Up to one thread a CPU this process may run on.
    pub(crate) fn per_cpu() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Runs `task` on an idle shard, else on a new one while fewer than the
    /// most run, else on the least loaded; counted there until it ends. It
    /// is polled only there: what it registers with a runtime when first
    /// polled (a socket) is that shard's. Must be called within a runtime:
    /// if no thread can be started at all, `task` runs on the caller's.
    pub(crate) fn spawn<Fut>(&self, task: Fut) -> tokio::task::JoinHandle<()>
    where
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let idle = shards
            .iter()
            .position(|s| s.load.load(Ordering::Relaxed) == 0);
        let chosen = match idle {
            Some(i) => Some(i),
            None if shards.len() < self.max => match self.start(shards.len()) {
                Ok(shard) => {
                    shards.push(shard);
                    Some(shards.len() - 1)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start a connection thread: sharing one");
                    Self::least_loaded(&shards)
                }
            },
            None => Self::least_loaded(&shards),
        };
        let Some(shard) = chosen.map(|i| &shards[i]) else {
            return tokio::spawn(task);
        };
        let load = Load::count(&shard.load);
        shard.handle.spawn(async move {
            let _load = load;
            task.await
        })
    }

    fn least_loaded(shards: &[Shard]) -> Option<usize> {
        (0..shards.len()).min_by_key(|&i| shards[i].load.load(Ordering::Relaxed))
    }

    /// Shard number `i`: its runtime, driven on its thread until the
    /// shards stop.
    fn start(&self, i: usize) -> io::Result<Shard> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let stop = self.stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mn-conn-{i}"))
            .spawn(move || {
                runtime.block_on(stop.cancelled());
                runtime.shutdown_timeout(SHUTDOWN_WAIT);
            })?;
        Ok(Shard {
            handle,
            load: Arc::new(AtomicUsize::new(0)),
            thread,
        })
    }

    /// How many connections each shard runs now.
    #[cfg(test)]
    fn loads(&self) -> Vec<usize> {
        let shards = self.shards.lock().unwrap();
        shards
            .iter()
            .map(|s| s.load.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.stop.cancel();
        let shards = std::mem::take(self.shards.get_mut().unwrap_or_else(|e| e.into_inner()));
        for shard in shards {
            let _ = shard.thread.join();
        }
    }
}

/// One connection counted on its shard, from the moment it is handed over.
struct Load(Arc<AtomicUsize>);

impl Load {
    fn count(load: &Arc<AtomicUsize>) -> Self {
        load.fetch_add(1, Ordering::Relaxed);
        Self(load.clone())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn connections_take_an_idle_shard_else_a_new_one_up_to_the_most() {
        let shards = Shards::new(2);
        let (release, released) = tokio::sync::watch::channel(false);
        let names = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let mut released = released.clone();
            let names = names.clone();
            tasks.push(shards.spawn(async move {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                names.lock().unwrap().push(name);
                let _ = released.wait_for(|r| *r).await;
            }));
        }
        // Counted when handed over: two each, whatever has run yet.
        assert_eq!(shards.loads(), vec![2, 2]);
        release.send(true).unwrap();
        block_on(async {
            for task in tasks {
                task.await.unwrap();
            }
        });
        assert_eq!(shards.loads(), vec![0, 0]);
        let mut names = names.lock().unwrap().clone();
        names.sort();
        assert_eq!(names, ["mn-conn-0", "mn-conn-0", "mn-conn-1", "mn-conn-1"]);
    }

    #[test]
    fn no_thread_starts_before_a_connection_and_an_idle_one_is_reused() {
        let shards = Shards::new(8);
        assert!(shards.loads().is_empty());
        for _ in 0..3 {
            let task = shards.spawn(async {});
            block_on(task).unwrap();
        }
        // One after another: the first thread ran all three.
        assert_eq!(shards.loads(), vec![0]);
    }

    #[test]
    fn dropping_the_shards_ends_their_tasks_and_threads() {
        struct Flag(Arc<AtomicUsize>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let shards = Shards::new(3);
        let dropped = Arc::new(AtomicUsize::new(0));
        let (started, is_started) = std::sync::mpsc::channel();
        for _ in 0..3 {
            let flag = Flag(dropped.clone());
            let started = started.clone();
            shards.spawn(async move {
                let _flag = flag;
                started.send(()).unwrap();
                std::future::pending::<()>().await;
            });
        }
        for _ in 0..3 {
            is_started.recv().unwrap();
        }
        assert_eq!(shards.loads(), vec![1, 1, 1]);
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        // Returns once every thread is joined, their tasks dropped.
        drop(shards);
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
    }
}
