/* hooks_graph.c — graph memory.  A graph's memory allocation nodes
 * (cuGraphAddMemAllocNode, or cuMemAllocAsync on a capturing stream) take
 * nothing when they are added or captured; the memory comes from the
 * device's graph memory pool when the instantiated graph is uploaded or
 * launched, and that pool keeps it — even after the graph is destroyed —
 * until cuDeviceGraphMemTrim (measured on an H100: docs/interposer.md).
 *
 * So: at instantiation the graph's allocation nodes are added up (per
 * instantiated graph, one device: the nodes' device); before an upload or
 * launch the pool's charge is raised to what the graph needs, refused with
 * CUDA_ERROR_OUT_OF_MEMORY past the cap (the driver not called); after it,
 * and after a trim or a destroy, the charge follows the pool's real size
 * (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) down or up.  A launch whose
 * graph the charge already covers costs one table lookup. */
#include <sys/mman.h>

#include "hooks.h"

#undef cuGraphInstantiate
#undef cuGraphLaunch
#undef cuGraphUpload

/* Per CUDA ordinal: what is charged for the device's graph memory pool. */
static uint64_t pool_charge[GS_MAX_ORDINALS];
static uint64_t pool_lock[GS_MAX_ORDINALS];

static void lock(int ord)
{
    while (__atomic_exchange_n(&pool_lock[ord], 1, __ATOMIC_ACQUIRE) != 0)
        while (__atomic_load_n(&pool_lock[ord], __ATOMIC_RELAXED) != 0) {
        }
}

static void unlock(int ord)
{
    __atomic_store_n(&pool_lock[ord], 0, __ATOMIC_RELEASE);
}

void gs_graph_reset_process(void)
{
    for (int i = 0; i < GS_MAX_ORDINALS; i++) {
        pool_charge[i] = 0;
        pool_lock[i] = 0;
    }
}

/* Under the ordinal's lock: the charge follows what the pool really holds.
 * Not while a capture is under way (a device query is no capture-safe call);
 * the next trim, destroy or launch catches up. */
static void reconcile_locked(int ord)
{
    if (gs_capturing() || gs_real_cuDeviceGetGraphMemAttribute == NULL) return;
    int idx = gs_dev_index((CUdevice)ord);
    if (idx < 0) return;
    cuuint64_t r = 0;
    if (gs_real_cuDeviceGetGraphMemAttribute((CUdevice)ord, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r) != CUDA_SUCCESS)
        return;
    if (r > pool_charge[ord]) gs_charge_force(idx, r - pool_charge[ord]);
    else if (r < pool_charge[ord]) gs_uncharge(idx, pool_charge[ord] - r);
    pool_charge[ord] = r;
}

static void reconcile(int ord)
{
    if (ord < 0 || ord >= GS_MAX_ORDINALS) return;
    lock(ord);
    reconcile_locked(ord);
    unlock(ord);
}

/* The bytes of a graph's allocation nodes and their device; 0 when none. */
static uint64_t graph_needs(CUgraph g, int *ordinal)
{
    size_t n = 0;
    *ordinal = -1;
    if (GS_CALL(gs_real_cuGraphGetNodes, g, NULL, &n) != CUDA_SUCCESS || n == 0) return 0;
    uint64_t total = 0;
    /* Instantiation is no hot path: a big graph's node list gets pages of
     * its own. */
    CUgraphNode batch[256];
    CUgraphNode *nodes = batch;
    size_t bytes = n * sizeof *nodes;
    if (n > 256) {
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return UINT64_MAX;
        nodes = m;
    }
    size_t got = n;
    if (gs_real_cuGraphGetNodes(g, nodes, &got) != CUDA_SUCCESS) got = 0;
    for (size_t i = 0; i < got && total != UINT64_MAX; i++) {
        CUgraphNodeType t;
        if (GS_CALL(gs_real_cuGraphNodeGetType, nodes[i], &t) != CUDA_SUCCESS || t != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            continue;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        if (GS_CALL(gs_real_cuGraphMemAllocNodeGetParams, nodes[i], &p) != CUDA_SUCCESS) continue;
        if (*ordinal < 0) *ordinal = p.poolProps.location.id;
        total = total + p.bytesize < total ? UINT64_MAX : total + p.bytesize;
    }
    if (nodes != batch) munmap(nodes, bytes);
    return total;
}

static CUresult instantiated(CUresult r, CUgraphExec *exec, CUgraph g)
{
    if (r != CUDA_SUCCESS || !gs_counting() || exec == NULL) return r;
    int ord;
    uint64_t need = graph_needs(g, &ord);
    if (need == 0) return r;
    if (ord < 0 || ord >= GS_MAX_ORDINALS || need == UINT64_MAX || gs_dev_index((CUdevice)ord) < 0 ||
        gs_remember((uint64_t)(uintptr_t)*exec, GS_T_GRAPH, gs_dev_index((CUdevice)ord), need, (uint64_t)ord) != 0) {
        /* Not one we can account for: refuse it rather than let it run uncounted. */
        GS_ERROR("cannot account for a graph with %llu bytes of allocation nodes; refusing it",
                 (unsigned long long)need);
        CUresult f = GS_CALL(gs_real_cuGraphExecDestroy, *exec);
        if (f != CUDA_SUCCESS) GS_ERROR("cannot destroy a refused graph (error %d)", (int)f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

GS_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    ENTER(gs_real_cuGraphInstantiateWithFlags);
    return instantiated(gs_real_cuGraphInstantiateWithFlags(exec, g, flags), exec, g);
}

GS_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    ENTER(gs_real_cuGraphInstantiateWithParams);
    return instantiated(gs_real_cuGraphInstantiateWithParams(exec, g, p), exec, g);
}

GS_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    ENTER(gs_real_cuGraphInstantiateWithParams_ptsz);
    return instantiated(gs_real_cuGraphInstantiateWithParams_ptsz(exec, g, p), exec, g);
}

GS_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph g, CUgraphNode *err, char *log, size_t len)
{
    ENTER(gs_real_cuGraphInstantiate_v2);
    return instantiated(gs_real_cuGraphInstantiate_v2(exec, g, err, log, len), exec, g);
}

/* An upload or launch's driver call, kept for a retry (pressure.c). */
struct graph_call {
    CUresult (*fn)(CUgraphExec, CUstream);
    CUgraphExec exec;
    CUstream s;
};

static CUresult graph_real(void *arg)
{
    struct graph_call *c = arg;
    return c->fn(c->exec, c->s);
}

/* Before an upload or launch: the pool must be able to hold the graph.
 * Where the driver then finds no room for what the charge covers, it is
 * memory someone else holds: retried (pressure.c). */
static CUresult make_real(CUgraphExec exec, CUstream s, CUresult (*fn)(CUgraphExec, CUstream))
{
    if (!gs_counting()) return fn(exec, s);
    struct gs_entry e;
    if (!gs_track_update(&gs_allocs, (uint64_t)(uintptr_t)exec, GS_T_GRAPH, 0, &e)) return fn(exec, s);
    int ord = (int)e.owner;
    struct graph_call c = {fn, exec, s};
    if (GS_LIKELY(__atomic_load_n(&pool_charge[ord], __ATOMIC_ACQUIRE) >= e.size)) {
        CUresult r = fn(exec, s);
        return GS_LIKELY(r == CUDA_SUCCESS) ? r : gs_pressure_retry((int)e.dev, r, graph_real, &c);
    }
    lock(ord);
    uint64_t more = e.size > pool_charge[ord] ? e.size - pool_charge[ord] : 0;
    if (more > 0 && gs_charge((int)e.dev, more) != 0) {
        unlock(ord);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool_charge[ord] += more;
    CUresult r = fn(exec, s);
    if (r != CUDA_SUCCESS) r = gs_pressure_retry((int)e.dev, r, graph_real, &c);
    /* Whatever the driver did, the charge now follows the pool. */
    if (r == CUDA_SUCCESS) reconcile_locked(ord);
    else {
        gs_uncharge((int)e.dev, more);
        pool_charge[ord] -= more;
    }
    unlock(ord);
    return r;
}

GS_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    ENTER(gs_real_cuGraphLaunch);
    void *t = gs_compute_admit_graph(s); /* compute share: docs/compute.md */
    CUresult r = make_real(exec, s, gs_real_cuGraphLaunch);
    gs_compute_launched(t, s, r);
    return r;
}

GS_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    ENTER(gs_real_cuGraphLaunch_ptsz);
    CUstream ps = s == NULL ? (CUstream)0x2 : s;
    void *t = gs_compute_admit_graph(ps); /* compute share: docs/compute.md */
    CUresult r = make_real(exec, s, gs_real_cuGraphLaunch_ptsz);
    gs_compute_launched(t, ps, r);
    return r;
}

GS_EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream s)
{
    ENTER(gs_real_cuGraphUpload);
    return make_real(exec, s, gs_real_cuGraphUpload);
}

GS_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s)
{
    ENTER(gs_real_cuGraphUpload_ptsz);
    return make_real(exec, s, gs_real_cuGraphUpload_ptsz);
}

GS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    ENTER(gs_real_cuGraphExecDestroy);
    struct gs_entry e;
    int had = gs_counting() && gs_track_take(&gs_allocs, (uint64_t)(uintptr_t)exec, GS_T_GRAPH, &e);
    CUresult r = gs_real_cuGraphExecDestroy(exec);
    if (had) {
        if (r != CUDA_SUCCESS && gs_track_insert(&gs_allocs, &e) != 0) GS_WARN("lost track of a graph");
        if (r == CUDA_SUCCESS) reconcile((int)e.owner);
    }
    return r;
}

GS_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    ENTER(gs_real_cuDeviceGraphMemTrim);
    CUresult r = gs_real_cuDeviceGraphMemTrim(dev);
    if (r == CUDA_SUCCESS && gs_counting()) reconcile((int)dev);
    return r;
}
