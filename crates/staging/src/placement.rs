//! Workload tables and box placement (AMRZone, Algorithm 1): a box goes to the least loaded
//! node, then to the least loaded data server (dserver) on that node. Loads are bytes.
//!
//! Beyond the paper, a dserver is only eligible when it is alive and has room for the box
//! (capacity 0: unlimited); a node is considered when it has an eligible dserver. Ties go to
//! the lowest index, as the paper's strict `<` scans do.

use std::collections::BTreeSet;

#[derive(Clone, Debug, Default)]
struct Node {
    /// Sum of the loads of all its dservers, dead ones included (their records still count).
    load: u64,
    /// Its live dservers by (load, id).
    live: BTreeSet<(u64, u32)>,
}

#[derive(Clone, Debug)]
struct Slot {
    node: u32,
    load: u64,
    capacity: u64,
    alive: bool,
}

/// The per-node and per-dserver workload tables. Dservers are numbered from 0 in the order
/// they are added, nodes likewise.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    nodes: Vec<Node>,
    dservers: Vec<Slot>,
    /// Nodes with at least one live dserver, by (load, index). The paper scans every node for
    /// each box; walking this set from the front finds the same node in logarithmic time when
    /// it has room, which matters with thousands of dservers.
    by_load: BTreeSet<(u64, u32)>,
}

impl Workload {
    pub fn new() -> Workload {
        Workload::default()
    }

    /// A new node without dservers; returns its index.
    pub fn add_node(&mut self) -> u32 {
        self.nodes.push(Node::default());
        (self.nodes.len() - 1) as u32
    }

    /// A new live dserver on `node` holding nothing; returns its id.
    pub fn add_dserver(&mut self, node: u32, capacity: u64) -> u32 {
        let id = self.dservers.len() as u32;
        self.dservers.push(Slot { node, load: 0, capacity, alive: false });
        self.set_alive(id, true);
        id
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn dservers(&self) -> usize {
        self.dservers.len()
    }

    pub fn node_of(&self, dserver: u32) -> u32 {
        self.dservers[dserver as usize].node
    }

    pub fn load(&self, dserver: u32) -> u64 {
        self.dservers[dserver as usize].load
    }

    pub fn node_load(&self, node: u32) -> u64 {
        self.nodes[node as usize].load
    }

    pub fn capacity(&self, dserver: u32) -> u64 {
        self.dservers[dserver as usize].capacity
    }

    pub fn alive(&self, dserver: u32) -> bool {
        self.dservers[dserver as usize].alive
    }

    pub fn set_capacity(&mut self, dserver: u32, capacity: u64) {
        self.dservers[dserver as usize].capacity = capacity;
    }

    pub fn set_alive(&mut self, dserver: u32, alive: bool) {
        let s = &mut self.dservers[dserver as usize];
        if s.alive == alive {
            return;
        }
        s.alive = alive;
        let (n, load) = (s.node, s.load);
        self.update_node(n, |node| {
            if alive {
                node.live.insert((load, dserver));
            } else {
                node.live.remove(&(load, dserver));
            }
        });
    }

    /// Whether `dserver` is alive and can take `nbytes` more.
    pub fn fits(&self, dserver: u32, nbytes: u64) -> bool {
        let s = &self.dservers[dserver as usize];
        // The node's load bounds the dserver's: when it cannot grow, neither can the dserver's.
        s.alive && self.nodes[s.node as usize].load.checked_add(nbytes).is_some() && (s.capacity == 0 || s.load + nbytes <= s.capacity)
    }

    /// Algorithm 1: the dserver to take a box of `nbytes`, or None when no dserver is eligible.
    /// Nothing is charged; call [`Workload::charge`] once the box is placed there.
    pub fn place(&self, nbytes: u64) -> Option<u32> {
        self.by_load.iter().find_map(|&(_, n)| self.nodes[n as usize].live.iter().map(|&(_, d)| d).find(|&d| self.fits(d, nbytes)))
    }

    /// Adds `nbytes` to the loads of `dserver` and its node. The caller checked that they fit
    /// (or restores loads that were there before).
    pub fn charge(&mut self, dserver: u32, nbytes: u64) {
        self.shift(dserver, |l| l + nbytes);
    }

    /// Takes back `nbytes` that [`Workload::charge`] added.
    pub fn release(&mut self, dserver: u32, nbytes: u64) {
        self.shift(dserver, |l| l - nbytes);
    }

    fn shift(&mut self, dserver: u32, f: impl Fn(u64) -> u64) {
        let s = &mut self.dservers[dserver as usize];
        let (old, alive, n) = (s.load, s.alive, s.node);
        s.load = f(old);
        let new = s.load;
        self.update_node(n, |node| {
            node.load = f(node.load);
            if alive {
                node.live.remove(&(old, dserver));
                node.live.insert((new, dserver));
            }
        });
    }

    /// Applies `f` to a node, keeping `by_load` in step with its load and live dservers.
    fn update_node(&mut self, n: u32, f: impl FnOnce(&mut Node)) {
        let node = &mut self.nodes[n as usize];
        if !node.live.is_empty() {
            self.by_load.remove(&(node.load, n));
        }
        f(node);
        if !node.live.is_empty() {
            self.by_load.insert((node.load, n));
        }
    }
}

/// The dserver loads after placing boxes of `nbytes`, in arrival order, on live dservers of
/// unlimited capacity, `dservers_per_node[i]` of them on node `i` (dservers numbered node by
/// node). For benchmarks against static partitions.
pub fn simulate(dservers_per_node: &[usize], nbytes: &[u64]) -> Vec<u64> {
    let mut w = Workload::new();
    for &k in dservers_per_node {
        let n = w.add_node();
        for _ in 0..k {
            w.add_dserver(n, 0);
        }
    }
    for &b in nbytes {
        if let Some(d) = w.place(b) {
            w.charge(d, b);
        }
    }
    (0..w.dservers() as u32).map(|d| w.load(d)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Algorithm 1 as the paper writes it (two linear scans), restricted to eligible dservers.
    fn scan(w: &Workload, nbytes: u64) -> Option<u32> {
        let nodes: Vec<u32> = (0..w.nodes() as u32).collect();
        let eligible = |n: u32| (0..w.dservers() as u32).filter(move |&d| w.node_of(d) == n && w.fits(d, nbytes));
        let node = nodes.into_iter().filter(|&n| eligible(n).next().is_some()).min_by_key(|&n| (w.node_load(n), n))?;
        eligible(node).min_by_key(|&d| (w.load(d), d))
    }

    #[test]
    fn least_loaded_node_then_least_loaded_dserver() {
        let mut w = Workload::new();
        let (a, b) = (w.add_node(), w.add_node());
        let a0 = w.add_dserver(a, 0);
        let a1 = w.add_dserver(a, 0);
        let b0 = w.add_dserver(b, 0);
        // All empty: node a (lowest index), its first dserver.
        assert_eq!(w.place(10), Some(a0));
        w.charge(a0, 10);
        // Node a holds 10, node b nothing.
        assert_eq!(w.place(10), Some(b0));
        w.charge(b0, 10);
        // Tie of nodes at 10: node a, and there its empty dserver.
        assert_eq!(w.place(5), Some(a1));
        w.charge(a1, 5);
        assert_eq!(w.node_load(a), 15);
        assert_eq!(w.place(1), Some(b0));
        w.release(a0, 10);
        assert_eq!((w.load(a0), w.node_load(a)), (0, 5));
        assert_eq!(w.place(1), Some(a0));
    }

    #[test]
    fn full_and_dead_dservers_are_skipped() {
        let mut w = Workload::new();
        let (a, b) = (w.add_node(), w.add_node());
        let a0 = w.add_dserver(a, 100);
        let a1 = w.add_dserver(a, 0);
        let b0 = w.add_dserver(b, 50);
        w.charge(a1, 1000);
        // Node b is least loaded but its only dserver cannot take 60 bytes.
        assert_eq!(w.place(60), Some(a0));
        assert_eq!(w.place(50), Some(b0));
        w.set_alive(b0, false);
        assert_eq!(w.place(50), Some(a0));
        // A capacity is inclusive.
        w.charge(a0, 100);
        assert!(!w.fits(a0, 1));
        assert_eq!(w.place(1), Some(a1));
        w.set_alive(a1, false);
        assert_eq!(w.place(1), None);
        w.set_alive(b0, true);
        assert_eq!(w.place(50), Some(b0));
        assert_eq!(w.place(51), None);
        // A dead dserver's load still counts for its node.
        assert_eq!(w.node_load(a), 1100);
    }

    #[test]
    fn loads_that_would_overflow_do_not_fit() {
        let mut w = Workload::new();
        let n = w.add_node();
        let d = w.add_dserver(n, 0);
        w.charge(d, u64::MAX - 1);
        assert_eq!(w.place(1), Some(d));
        assert_eq!(w.place(2), None);
    }

    #[test]
    fn ordered_tables_agree_with_the_paper_scans() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut w = Workload::new();
        let mut placed: Vec<(u32, u64)> = Vec::new();
        for _ in 0..6 {
            let n = w.add_node();
            for _ in 0..rng.usize(0..4) {
                w.add_dserver(n, [0, 500, 2000][rng.usize(0..3)]);
            }
        }
        for _ in 0..3000 {
            match rng.u8(0..10) {
                0 if w.dservers() > 0 => w.set_alive(rng.u32(0..w.dservers() as u32), rng.bool()),
                1 if !placed.is_empty() => {
                    let (d, b) = placed.swap_remove(rng.usize(0..placed.len()));
                    w.release(d, b);
                }
                _ => {
                    let b = rng.u64(0..200);
                    let d = w.place(b);
                    assert_eq!(d, scan(&w, b));
                    if let Some(d) = d {
                        w.charge(d, b);
                        placed.push((d, b));
                    }
                }
            }
        }
        for n in 0..w.nodes() as u32 {
            let sum: u64 = (0..w.dservers() as u32).filter(|&d| w.node_of(d) == n).map(|d| w.load(d)).sum();
            assert_eq!(w.node_load(n), sum);
        }
    }

    #[test]
    fn simulation_balances_equal_boxes() {
        let loads = simulate(&[2, 0, 2], &[10; 8]);
        assert_eq!(loads, vec![20; 4]);
        // Node by node: node 0 takes the big box, then node 1 gets boxes until it catches up.
        assert_eq!(simulate(&[1, 2], &[100, 30, 30, 30, 30]), vec![100, 60, 60]);
        assert!(simulate(&[0], &[1]).is_empty());
    }
}
