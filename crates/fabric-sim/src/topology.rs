//! Topologies and routing.
//!
//! A topology is a set of vertices (the nodes `0..nodes`, then switches for switched
//! topologies) joined by directed links: every cable is two links, one per direction, each
//! with the bandwidth of the slower of its two ports and the latency of the port it leaves.
//!
//! Routing is fixed, minimal-hop and deterministic (PEACH2 has no adaptive routing,
//! CALIBRATION.md "Routing is fixed, minimal hop count"):
//!
//! - ring: the shorter way round; a tie (distance n/2) goes `next`;
//! - 2 x N torus: first along the ring of the source (the shorter way, ties east), then
//!   through the `south` port when the rows differ;
//! - n-D torus: dimension order 0, 1, 2, ...; in each dimension the shorter way, ties `plus`;
//!   n-D mesh: dimension order, the only way;
//! - fat tree: up to the source's leaf; to another leaf through spine `dst mod spines`
//!   (destination-based, as static d-mod-k InfiniBand routing), then down;
//! - crossbar: up to the switch, down to the destination.
//!
//! A [`Path`] lists its links in order; its hop count is the number of links.
//!
//! # Several devices per node
//!
//! With an `[intra_node]` table of `devices = D`, every node of the topology above is a
//! DEVICE (a GPU with its own network interface, as in a DGX H100, whose eight H100s each
//! have a ConnectX-7 HCA of their own; or a socket): fabric nodes `g D .. (g + 1) D` are the
//! devices of physical node g, and ranks, placed one per fabric node, sit one per device.
//! Inside each node the devices are joined by a switch per path: `host` (messages between
//! host memories, MPI's shared-memory copy) and, when given, `gpu` (transfers touching GPU
//! memory, NVLink through NVSwitch). Each is a star: a link from every device to the
//! node's switch and back, of the path's port (bandwidth per direction, latency). A route
//! between two devices of one node is up to that switch and down, on the path of the
//! transfer's memory kind (the GPU path when either end is GPU memory and the config has
//! one); between nodes it is the network route above, from the source device's own port.
//! The switch's forwarding cost is the path's `switch_us` (in place of `forward_us`); a
//! message on it starts at the path's `start_us` and uses neither the network interface
//! (DMA device, host port, injection cap) nor a GPU protocol ([`crate::fabric`]); it waits
//! in the source device's DMA queues like any message (with `queue_per_peer`, the queue of
//! its destination), the one simplification of the model inside a node. The memories a
//! device reads and writes (`[memory]`) are its own: a preset gives each device its share.
//! The intra-node links come after the network's, and their switches after every other
//! vertex.

use crate::error::FabricError;
use crate::spec::{FabricConfig, IntraNodeConfig, TopologyConfig};

/// Index of a directed link.
pub type LinkId = u32;

const NONE: u32 = u32::MAX;

/// One directed link.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Vertex it leaves (nodes are `0..nodes`, switches follow).
    pub from: u32,
    /// Vertex it enters.
    pub to: u32,
    /// Index into the config's ports of the port it leaves.
    pub port: u32,
    /// Bandwidth in bytes per second.
    pub bandwidth: f64,
    /// Latency in seconds.
    pub latency: f64,
}

/// A route: the links from source to destination, in order (empty for a node to itself).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Path {
    /// Links in order.
    pub links: Vec<LinkId>,
}

impl Path {
    /// Number of links crossed.
    pub fn hops(&self) -> usize {
        self.links.len()
    }
}

#[derive(Debug, Clone)]
enum Shape {
    Ring {
        n: usize,
    },
    Torus2xn {
        columns: usize,
        south: bool,
    },
    /// `coords[v * dims.len() + k]` is node v's coordinate in dimension k (routing reads
    /// them instead of dividing); every vertex has `2 * dims.len()` slots.
    Grid {
        dims: Vec<usize>,
        wrap: bool,
        coords: Vec<u32>,
    },
    FatTree {
        half: usize,
        leaves: usize,
    },
    Crossbar,
}

/// The built topology: vertices, links and the routing function.
#[derive(Debug, Clone)]
pub struct Topology {
    nodes: usize,
    vertices: usize,
    links: Vec<Link>,
    /// Per vertex, `slot_base[v]..slot_base[v+1]` indexes `slots`: the outgoing link in each
    /// direction slot (meaning fixed per shape), `NONE` when absent.
    slot_base: Vec<u32>,
    slots: Vec<u32>,
    shape: Shape,
    /// Devices per node and the intra-node paths (see the module doc), if any.
    intra: Option<Intra>,
}

/// The intra-node paths of a topology with several devices per node: path k's up link
/// from device v is link `first + k * 2 * nodes + 2 v`, its down link to v the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Intra {
    devices: usize,
    paths: usize,
    first: u32,
}

/// Which intra-node path a transfer between two devices of one node takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntraPath {
    /// Between host memories.
    Host,
    /// Touching GPU memory (the host path when the config has no GPU path).
    Gpu,
}

struct Builder<'a> {
    cfg: &'a FabricConfig,
    links: Vec<Link>,
    slot_base: Vec<u32>,
    slots: Vec<u32>,
}

impl Builder<'_> {
    fn vertices(&mut self, count: usize, slots_each: usize) {
        for _ in 0..count {
            let base = self.slots.len() as u32;
            self.slot_base.push(base);
            self.slots.extend(std::iter::repeat_n(NONE, slots_each));
        }
    }

    /// A cable between (a, slot sa, port pa) and (b, slot sb, port pb): two links.
    fn cable(&mut self, a: usize, sa: usize, pa: usize, b: usize, sb: usize, pb: usize) {
        let (ppa, ppb) = (&self.cfg.ports[pa], &self.cfg.ports[pb]);
        let bw = ppa.bandwidth_gbs.min(ppb.bandwidth_gbs) * 1e9;
        for (from, slot, port, to, lat) in [
            (a, sa, pa, b, ppa.latency_us),
            (b, sb, pb, a, ppb.latency_us),
        ] {
            let id = self.links.len() as u32;
            self.links.push(Link {
                from: from as u32,
                to: to as u32,
                port: port as u32,
                bandwidth: bw,
                latency: lat * 1e-6,
            });
            self.slots[self.slot_base[from] as usize + slot] = id;
        }
    }
}

/// How many vertices, direction slots and directed links a topology config builds, counted
/// from its sizes alone (before anything is allocated); `None` when a count overflows 64
/// bits. Upper bounds where the exact count depends on ports (a torus dimension without
/// ports has no links).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) nodes: u64,
    pub(crate) vertices: u64,
    pub(crate) slots: u64,
    pub(crate) links: u64,
}

impl Counts {
    pub(crate) fn of(topology: &TopologyConfig) -> Option<Self> {
        let u = |x: usize| x as u64;
        // Nodes plus one switch, a slot and a cable (two links) per node.
        let star = |n: u64| {
            Some(Counts {
                nodes: n,
                vertices: n.checked_add(1)?,
                slots: n.checked_mul(2)?,
                links: n.checked_mul(2)?,
            })
        };
        match topology {
            TopologyConfig::Ring { nodes, .. } => {
                let n = u(*nodes);
                Some(Counts {
                    nodes: n,
                    vertices: n,
                    slots: n.checked_mul(2)?,
                    links: n.checked_mul(2)?,
                })
            }
            TopologyConfig::Torus2xn { columns, .. } => {
                let n = u(*columns).checked_mul(2)?;
                Some(Counts {
                    nodes: n,
                    vertices: n,
                    slots: n.checked_mul(3)?,
                    links: n.checked_mul(3)?,
                })
            }
            TopologyConfig::Torus { dims, .. } | TopologyConfig::Mesh { dims, .. } => {
                let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(u(d)))?;
                let per = u(dims.len()).checked_mul(2)?;
                Some(Counts {
                    nodes: n,
                    vertices: n,
                    slots: n.checked_mul(per)?,
                    links: n.checked_mul(per)?,
                })
            }
            TopologyConfig::FatTree { nodes, radix, .. } => {
                let (n, r) = (u(*nodes), u(*radix));
                if n <= r {
                    return star(n);
                }
                let half = (r / 2).max(1);
                let leaves = n.div_ceil(half);
                // Leaves have 2 * half slots, spines one per leaf; a cable per node and one
                // per (leaf, spine) pair.
                let pairs = leaves.checked_mul(half)?;
                Some(Counts {
                    nodes: n,
                    vertices: n.checked_add(leaves)?.checked_add(half)?,
                    slots: n.checked_add(pairs.checked_mul(3)?)?,
                    links: n.checked_add(pairs)?.checked_mul(2)?,
                })
            }
            TopologyConfig::Crossbar { nodes, .. } => star(u(*nodes)),
        }
    }

    /// The counts with the intra-node paths of `intra` added (a switch per node and path,
    /// two links per device and path); `None` on overflow.
    pub(crate) fn with_intra(self, intra: Option<&IntraNodeConfig>) -> Option<Self> {
        let Some(c) = intra else { return Some(self) };
        let paths = 1 + u64::from(c.gpu.is_some());
        let groups = self.nodes / (c.devices.max(1) as u64);
        Some(Counts {
            nodes: self.nodes,
            vertices: self.vertices.checked_add(groups.checked_mul(paths)?)?,
            slots: self.slots,
            links: self
                .links
                .checked_add(self.nodes.checked_mul(2)?.checked_mul(paths)?)?,
        })
    }

    /// Bytes the built topology holds (links, slots, per-vertex offsets) plus the
    /// connectivity check's scratch; `None` on overflow.
    pub(crate) fn bytes(&self) -> Option<u64> {
        let link = std::mem::size_of::<Link>() as u64;
        // slot_base (u32) + the check's seen flag (bool) and stack entry (u32).
        let per_vertex = self.vertices.checked_mul(4 + 1 + 4)?;
        // Per slot its link (u32), and for grids half a node coordinate (u32 per
        // dimension, two slots per dimension): counted for every shape.
        per_vertex
            .checked_add(self.slots.checked_mul(4 + 2)?)?
            .checked_add(self.links.checked_mul(link)?)
    }
}

impl Topology {
    /// Build the topology of a config (checks port names, sizes and connectivity).
    pub(crate) fn build(cfg: &FabricConfig) -> Result<Self, FabricError> {
        let mut b = Builder {
            cfg,
            links: Vec::new(),
            slot_base: Vec::new(),
            slots: Vec::new(),
        };
        let distinct = |field: &str, names: &[&String]| -> Result<(), FabricError> {
            for (i, n) in names.iter().enumerate() {
                if names[..i].contains(n) {
                    return Err(cfg.invalid(field, format!("port `{n}` used for two roles")));
                }
            }
            Ok(())
        };
        let (nodes, shape) = match &cfg.topology {
            TopologyConfig::Ring { nodes, next, prev } => {
                let n = *nodes;
                if n < 2 {
                    return Err(cfg.invalid("topology.nodes", "a ring needs at least 2 nodes"));
                }
                let pn = cfg.port_index("topology.next", next)?;
                let pp = cfg.port_index("topology.prev", prev)?;
                distinct("topology", &[next, prev])?;
                b.vertices(n, 2);
                for i in 0..n {
                    b.cable(i, 0, pn, (i + 1) % n, 1, pp);
                }
                (n, Shape::Ring { n })
            }
            TopologyConfig::Torus2xn {
                columns,
                east,
                west,
                south,
            } => {
                let c = *columns;
                if c < 2 {
                    return Err(cfg.invalid("topology.columns", "each ring needs at least 2 nodes"));
                }
                let pe = cfg.port_index("topology.east", east)?;
                let pw = cfg.port_index("topology.west", west)?;
                let mut roles = vec![east, west];
                let ps = match south {
                    Some(s) => {
                        roles.push(s);
                        Some(cfg.port_index("topology.south", s)?)
                    }
                    None => None,
                };
                distinct("topology", &roles)?;
                b.vertices(2 * c, 3);
                for r in 0..2 {
                    for col in 0..c {
                        b.cable(r * c + col, 0, pe, r * c + (col + 1) % c, 1, pw);
                    }
                }
                if let Some(ps) = ps {
                    for col in 0..c {
                        b.cable(col, 2, ps, c + col, 2, ps);
                    }
                }
                (
                    2 * c,
                    Shape::Torus2xn {
                        columns: c,
                        south: ps.is_some(),
                    },
                )
            }
            TopologyConfig::Torus { dims, ports } | TopologyConfig::Mesh { dims, ports } => {
                let wrap = matches!(cfg.topology, TopologyConfig::Torus { .. });
                if dims.is_empty() || dims.contains(&0) {
                    return Err(cfg.invalid(
                        "topology.dims",
                        "needs at least one dimension, each of size >= 1",
                    ));
                }
                if ports.len() > dims.len() {
                    return Err(cfg.invalid(
                        "topology.ports",
                        format!("{} port pairs for {} dimensions", ports.len(), dims.len()),
                    ));
                }
                let n = dims
                    .iter()
                    .try_fold(1usize, |a, &d| a.checked_mul(d))
                    .filter(|&n| n <= u32::MAX as usize / 2)
                    .ok_or_else(|| cfg.invalid("topology.dims", "too many nodes"))?;
                let mut idx = Vec::new();
                let mut roles = Vec::new();
                for (k, [plus, minus]) in ports.iter().enumerate() {
                    idx.push((
                        cfg.port_index(&format!("topology.ports[{k}][0]"), plus)?,
                        cfg.port_index(&format!("topology.ports[{k}][1]"), minus)?,
                    ));
                    roles.push(plus);
                    roles.push(minus);
                }
                distinct("topology.ports", &roles)?;
                let nd = dims.len();
                b.vertices(n, 2 * nd);
                let mut stride = 1;
                for (k, &d) in dims.iter().enumerate() {
                    if let Some(&(pp, pm)) = idx.get(k) {
                        if d > 1 {
                            for v in 0..n {
                                let x = (v / stride) % d;
                                if x + 1 < d {
                                    b.cable(v, 2 * k, pp, v + stride, 2 * k + 1, pm);
                                } else if wrap {
                                    b.cable(v, 2 * k, pp, v + stride - d * stride, 2 * k + 1, pm);
                                }
                            }
                        }
                    }
                    stride *= d;
                }
                let mut coords = Vec::with_capacity(n * nd);
                for v in 0..n {
                    let mut rest = v;
                    for &d in dims {
                        coords.push((rest % d) as u32);
                        rest /= d;
                    }
                }
                (
                    n,
                    Shape::Grid {
                        dims: dims.clone(),
                        wrap,
                        coords,
                    },
                )
            }
            TopologyConfig::FatTree { nodes, radix, port } => {
                let (n, r) = (*nodes, *radix);
                let p = cfg.port_index("topology.port", port)?;
                if r < 2 || r % 2 != 0 {
                    return Err(cfg.invalid("topology.radix", "must be even and at least 2"));
                }
                if n == 0 {
                    return Err(cfg.invalid("topology.nodes", "must be at least 1"));
                }
                let half = r / 2;
                if n <= r {
                    // One switch: node slot 0 = up; switch slots = down to each node.
                    b.vertices(n, 1);
                    b.vertices(1, n);
                    for v in 0..n {
                        b.cable(v, 0, p, n, v, p);
                    }
                    (n, Shape::FatTree { half, leaves: 0 })
                } else {
                    let leaves = n.div_ceil(half);
                    if leaves > r {
                        return Err(cfg.invalid(
                            "topology.nodes",
                            format!(
                                "{n} nodes need more than two levels of {r}-port switches (at most {})",
                                r * half
                            ),
                        ));
                    }
                    // Vertices: nodes, leaves (slots: half down, half up), spines (slots:
                    // one per leaf).
                    b.vertices(n, 1);
                    b.vertices(leaves, 2 * half);
                    b.vertices(half, leaves);
                    for v in 0..n {
                        b.cable(v, 0, p, n + v / half, v % half, p);
                    }
                    for l in 0..leaves {
                        for s in 0..half {
                            b.cable(n + l, half + s, p, n + leaves + s, l, p);
                        }
                    }
                    (n, Shape::FatTree { half, leaves })
                }
            }
            TopologyConfig::Crossbar { nodes, port } => {
                let n = *nodes;
                let p = cfg.port_index("topology.port", port)?;
                if n == 0 {
                    return Err(cfg.invalid("topology.nodes", "must be at least 1"));
                }
                b.vertices(n, 1);
                b.vertices(1, n);
                for v in 0..n {
                    b.cable(v, 0, p, n, v, p);
                }
                (n, Shape::Crossbar)
            }
        };
        let network_vertices = b.slot_base.len();
        b.slot_base.push(b.slots.len() as u32);
        // The network alone must connect every device: a node's devices reach the others
        // through their own ports.
        let mut topo = Topology {
            nodes,
            vertices: network_vertices,
            links: b.links,
            slot_base: b.slot_base,
            slots: b.slots,
            shape,
            intra: None,
        };
        topo.check_connected(cfg)?;
        if let Some(c) = &cfg.intra_node {
            topo.add_intra(cfg, c)?;
        }
        Ok(topo)
    }

    /// Add the intra-node paths of `c` (see the module doc): checked against the node
    /// count, then a switch per node and path with a link to and from every device.
    fn add_intra(&mut self, cfg: &FabricConfig, c: &IntraNodeConfig) -> Result<(), FabricError> {
        let n = self.nodes;
        if c.devices < 2 {
            return Err(cfg.invalid(
                "intra_node.devices",
                format!("must be at least 2, got {}", c.devices),
            ));
        }
        if !n.is_multiple_of(c.devices) {
            return Err(cfg.invalid(
                "intra_node.devices",
                format!(
                    "the topology's {n} fabric nodes (devices) are not a whole number of nodes of {} devices",
                    c.devices
                ),
            ));
        }
        let mut paths = vec![("intra_node.host.port", &c.host)];
        if let Some(g) = &c.gpu {
            paths.push(("intra_node.gpu.port", g));
        }
        let first = self.links.len() as u32;
        let groups = n / c.devices;
        for (k, (field, path)) in paths.iter().enumerate() {
            let port = cfg.port_index(field, &path.port)?;
            let p = &cfg.ports[port];
            let (bandwidth, latency) = (p.bandwidth_gbs * 1e9, p.latency_us * 1e-6);
            let switches = self.vertices + k * groups;
            for v in 0..n {
                let sw = (switches + v / c.devices) as u32;
                for (from, to) in [(v as u32, sw), (sw, v as u32)] {
                    self.links.push(Link {
                        from,
                        to,
                        port: port as u32,
                        bandwidth,
                        latency,
                    });
                }
            }
        }
        self.vertices += paths.len() * groups;
        self.intra = Some(Intra {
            devices: c.devices,
            paths: paths.len(),
            first,
        });
        Ok(())
    }

    /// Devices per node: `[intra_node] devices`, 1 without the table.
    pub fn devices_per_node(&self) -> usize {
        self.intra.map_or(1, |i| i.devices)
    }

    /// Whether two fabric nodes are devices of one node (and not the same one).
    pub fn same_node(&self, a: usize, b: usize) -> bool {
        a != b && self.intra.is_some_and(|i| a / i.devices == b / i.devices)
    }

    /// The intra-node path (0: host, 1: GPU) a link belongs to, if it is an intra-node link.
    pub(crate) fn intra_path_of(&self, link: LinkId) -> Option<usize> {
        let i = self.intra?;
        let at = link.checked_sub(i.first)? as usize;
        Some(at / (2 * self.nodes))
    }

    fn check_connected(&self, cfg: &FabricConfig) -> Result<(), FabricError> {
        let mut seen = vec![false; self.vertices];
        let mut stack = vec![0u32];
        seen[0] = true;
        while let Some(v) = stack.pop() {
            let v = v as usize;
            for &l in &self.slots[self.slot_base[v] as usize..self.slot_base[v + 1] as usize] {
                if l != NONE {
                    let to = self.links[l as usize].to as usize;
                    if !seen[to] {
                        seen[to] = true;
                        stack.push(to as u32);
                    }
                }
            }
        }
        match (0..self.nodes).find(|&v| !seen[v]) {
            Some(v) => Err(cfg.invalid(
                "topology",
                format!("disconnected: node 0 cannot reach node {v}"),
            )),
            None => Ok(()),
        }
    }

    /// Number of nodes (endpoints).
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// All directed links.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    fn slot(&self, v: usize, s: usize) -> u32 {
        let l = self.slots[self.slot_base[v] as usize + s];
        debug_assert_ne!(l, NONE, "routing used a missing link");
        l
    }

    /// Append the route from node `src` to node `dst` to `out` (between two devices of one
    /// node: the host path; see [`Topology::route_path_into`]).
    ///
    /// # Panics
    /// If a node is out of range (callers check against [`Topology::nodes`]).
    #[track_caller]
    pub fn route_into(&self, src: usize, dst: usize, out: &mut Vec<LinkId>) {
        self.route_path_into(src, dst, IntraPath::Host, out);
    }

    /// Append the route from node `src` to node `dst` to `out`, on intra-node path `path`
    /// when the two are devices of one node.
    ///
    /// # Panics
    /// If a node is out of range (callers check against [`Topology::nodes`]).
    #[track_caller]
    pub fn route_path_into(&self, src: usize, dst: usize, path: IntraPath, out: &mut Vec<LinkId>) {
        assert!(
            src < self.nodes && dst < self.nodes,
            "route({src}, {dst}) on {} nodes",
            self.nodes
        );
        if src == dst {
            return;
        }
        if let Some(i) = self.intra.filter(|i| src / i.devices == dst / i.devices) {
            let k = match path {
                IntraPath::Gpu if i.paths > 1 => 1,
                _ => 0,
            };
            let base = i.first as usize + k * 2 * self.nodes;
            out.push((base + 2 * src) as LinkId);
            out.push((base + 2 * dst + 1) as LinkId);
            return;
        }
        match &self.shape {
            Shape::Ring { n } => {
                let slot = |v, s| self.slot(v, s);
                ring_walk(self, slot, 0, 1, src, dst, *n, 0, 1, out);
            }
            Shape::Torus2xn { columns, south } => {
                let c = *columns;
                let (r0, c0) = (src / c, src % c);
                let (r1, c1) = (dst / c, dst % c);
                let slot = |v, s| self.slot(v, s);
                ring_walk(self, slot, r0 * c, 1, c0, c1, c, 0, 1, out);
                if r0 != r1 {
                    debug_assert!(*south);
                    out.push(self.slot(r0 * c + c1, 2));
                }
            }
            Shape::Grid { dims, wrap, coords } => {
                let nd = dims.len();
                let (cs, cd) = (&coords[src * nd..][..nd], &coords[dst * nd..][..nd]);
                // Every vertex has 2 * nd slots: vertex v's are at v * 2 * nd.
                let slot = |v: usize, s: usize| {
                    let l = self.slots[v * 2 * nd + s];
                    debug_assert_ne!(l, NONE, "routing used a missing link");
                    l
                };
                let mut cur = src;
                let mut stride = 1;
                for k in 0..nd {
                    let (x, t, d) = (cs[k] as usize, cd[k] as usize, dims[k]);
                    if x != t {
                        let base = cur - x * stride;
                        let target = base + t * stride;
                        if *wrap {
                            ring_walk(self, slot, base, stride, x, t, d, 2 * k, 2 * k + 1, out);
                        } else {
                            let (s, steps) = if t > x {
                                (2 * k, t - x)
                            } else {
                                (2 * k + 1, x - t)
                            };
                            let mut v = cur;
                            for _ in 0..steps {
                                let l = slot(v, s);
                                out.push(l);
                                v = self.links[l as usize].to as usize;
                            }
                            debug_assert_eq!(v, target);
                        }
                        cur = target;
                    }
                    stride *= d;
                }
            }
            Shape::FatTree { half, leaves } => {
                let n = self.nodes;
                out.push(self.slot(src, 0));
                if *leaves == 0 {
                    out.push(self.slot(n, dst));
                } else {
                    let (ls, ld) = (src / half, dst / half);
                    if ls != ld {
                        let spine = dst % half;
                        out.push(self.slot(n + ls, half + spine));
                        out.push(self.slot(n + leaves + spine, ld));
                    }
                    out.push(self.slot(n + ld, dst % half));
                }
            }
            Shape::Crossbar => {
                out.push(self.slot(src, 0));
                out.push(self.slot(self.nodes, dst));
            }
        }
    }

    /// The route from node `src` to node `dst`.
    ///
    /// # Panics
    /// If a node is out of range.
    #[track_caller]
    pub fn route(&self, src: usize, dst: usize) -> Path {
        let mut links = Vec::new();
        self.route_into(src, dst, &mut links);
        Path { links }
    }
}

/// Walk a ring of `n` members, member i the vertex `base + i * stride`, from member `x` to
/// member `y`, the shorter way; a tie goes through slot `plus`, which leads from member i to
/// member i + 1 (and `minus` to i - 1), as every shape builds its rings. The vertices are
/// computed, not read from the links, so the walk does not chase pointers; `slot(v, s)` is
/// vertex v's link in slot s (the shape's own lookup: grids compute where the slots are).
#[allow(clippy::too_many_arguments)]
#[inline]
fn ring_walk(
    t: &Topology,
    slot_of: impl Fn(usize, usize) -> u32,
    base: usize,
    stride: usize,
    x: usize,
    y: usize,
    n: usize,
    plus: usize,
    minus: usize,
    out: &mut Vec<LinkId>,
) {
    let fwd = if y >= x { y - x } else { y + n - x };
    let (slot, steps, step) = if fwd <= n - fwd {
        (plus, fwd, 1)
    } else {
        (minus, n - fwd, n - 1)
    };
    out.reserve(steps);
    let mut i = x;
    for _ in 0..steps {
        let l = slot_of(base + i * stride, slot);
        out.push(l);
        i += step;
        if i >= n {
            i -= n;
        }
        debug_assert_eq!(t.links[l as usize].to as usize, base + i * stride);
    }
    debug_assert_eq!(i, y);
}
