/* fake_graph.c — stream capture, graphs and graph memory in the fake
 * libcuda.so.1.
 *
 * A capturing stream's cuMemAllocAsync records a memory allocation node (no
 * memory yet).  Graph memory becomes real when an instantiated graph is
 * uploaded or launched: the device's graph memory pool grows to what the
 * graph's allocation nodes need, and keeps it (even after the graph is
 * destroyed) until cuDeviceGraphMemTrim, as the real driver's does.  A call
 * that is not capture-safe (cuStreamGetDevice, cuMemPoolGetAttribute) while
 * a global-mode capture is under way invalidates it, as seen on an H100. */
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

enum { M_GRAPH = 0x6a6a6a6a, M_NODE = 0x4e4e4e4e, M_EXEC = 0xe8e8e8e8 };
#define GRAPH_NODES 64
struct fnode {
    uint32_t magic;
    struct fgraph *g;
    CUgraphNodeType type;
    uint64_t bytes;
    int ordinal;
    CUdeviceptr va;
};
struct fgraph {
    uint32_t magic;
    int n;
    struct fnode nodes[GRAPH_NODES];
};
struct fexec {
    uint32_t magic;
    int alive, launched;
    uint64_t need[FAKE_MAX_GPUS];
};
static int active_global_captures;
static uint64_t graph_reserved[FAKE_MAX_GPUS];
static struct fexec *execs[1024];
static int exec_count;
#define MAX_CAPTURING 64
static struct fstream *capturing_streams[MAX_CAPTURING];

void fake_capture_unsafe_call(void)
{
    if (__atomic_load_n(&active_global_captures, __ATOMIC_ACQUIRE) == 0) return;
    fake_lock();
    if (active_global_captures > 0)
        for (int i = 0; i < MAX_CAPTURING; i++)
            if (capturing_streams[i] != NULL && capturing_streams[i]->global_mode) capturing_streams[i]->invalidated = 1;
    fake_unlock();
}

static struct fnode *node_add(struct fgraph *g, CUgraphNodeType type)
{
    if (g->n >= GRAPH_NODES) return NULL;
    struct fnode *n = &g->nodes[g->n++];
    *n = (struct fnode){.magic = M_NODE, .g = g, .type = type};
    return n;
}

int fake_capture_alloc(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    struct fstream *st = fake_stream_real(s);
    if (st == NULL || !st->capturing) return 0;
    fake_lock();
    struct fnode *n = node_add(st->graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (n != NULL) {
        n->bytes = bytes;
        n->ordinal = st->ctx->ordinal;
        n->va = fake_va_alloc(st->ctx->phys, bytes);
        *dptr = n->va;
    } else {
        st->invalidated = 1;
        *dptr = 0;
    }
    fake_unlock();
    return 1;
}

API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    NEED_INIT();
    struct fstream *st = fake_stream_real(s);
    if (st == NULL) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    fake_lock();
    CUresult r = CUDA_SUCCESS;
    int slot = -1;
    for (int i = 0; i < MAX_CAPTURING && slot < 0; i++)
        if (capturing_streams[i] == NULL) slot = i;
    struct fgraph *graph = NULL;
    if (st->capturing) r = CUDA_ERROR_ILLEGAL_STATE;
    else if (slot < 0 || (graph = calloc(1, sizeof *graph)) == NULL) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        st->capturing = 1;
        st->invalidated = 0;
        st->global_mode = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        st->graph = graph;
        st->graph->magic = M_GRAPH;
        capturing_streams[slot] = st;
        if (st->global_mode) active_global_captures++;
    }
    fake_unlock();
    return r;
}

API CUresult cuStreamBeginCapture(CUstream s)
{
    return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

API CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    NEED_INIT();
    struct fstream *st = fake_stream_real(s);
    if (st == NULL || g == NULL) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    if (!st->capturing) {
        fake_unlock();
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    st->capturing = 0;
    for (int i = 0; i < MAX_CAPTURING; i++)
        if (capturing_streams[i] == st) capturing_streams[i] = NULL;
    if (st->global_mode) active_global_captures--;
    CUresult r = CUDA_SUCCESS;
    if (st->invalidated) {
        free(st->graph);
        *g = NULL;
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        *g = (CUgraph)st->graph;
    }
    st->graph = NULL;
    fake_unlock();
    return r;
}

API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    NEED_INIT();
    if (status == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fstream *st = fake_stream_real(s);
    if (st == NULL) {
        /* The legacy stream while a global capture is under way: an error
         * that invalidates the capture, as the real driver does. */
        if ((s == NULL || s == CU_STREAM_LEGACY) && __atomic_load_n(&active_global_captures, __ATOMIC_ACQUIRE) > 0) {
            fake_capture_unsafe_call();
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
    }
    fake_lock();
    *status = !st->capturing ? CU_STREAM_CAPTURE_STATUS_NONE
              : st->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuGraphCreate(CUgraph *g, unsigned int flags)
{
    NEED_INIT();
    if (g == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    struct fgraph *fg = calloc(1, sizeof *fg);
    if (fg == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    fg->magic = M_GRAPH;
    *g = (CUgraph)fg;
    return CUDA_SUCCESS;
}

API CUresult cuGraphDestroy(CUgraph g)
{
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    fg->magic = 0;
    free(fg);
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                    CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    NEED_INIT();
    if (node == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH || p == NULL || p->bytesize == 0 ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = fake_phys_of(p->poolProps.location.id);
    if (phys < 0) return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    struct fnode *n = node_add(fg, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (n != NULL) {
        n->bytes = p->bytesize;
        n->ordinal = p->poolProps.location.id;
        n->va = fake_va_alloc(phys, p->bytesize);
        p->dptr = n->va;
    }
    fake_unlock();
    if (n == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *node = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                   CUdeviceptr dptr)
{
    NEED_INIT();
    if (node == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    struct fnode *n = node_add(fg, CU_GRAPH_NODE_TYPE_MEM_FREE);
    if (n != NULL) n->va = dptr;
    fake_unlock();
    if (n == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    *node = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH || count == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (nodes == NULL) {
        *count = (size_t)fg->n;
        return CUDA_SUCCESS;
    }
    size_t n = *count < (size_t)fg->n ? *count : (size_t)fg->n;
    for (size_t i = 0; i < n; i++) nodes[i] = (CUgraphNode)&fg->nodes[i];
    *count = n;
    return CUDA_SUCCESS;
}

API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    struct fnode *n = (struct fnode *)node;
    if (n == NULL || n->magic != M_NODE || type == NULL) return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}

API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct fnode *n = (struct fnode *)node;
    if (n == NULL || n->magic != M_NODE || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(p, 0, sizeof *p);
    p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->poolProps.location.id = n->ordinal;
    p->bytesize = n->bytes;
    p->dptr = n->va;
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    NEED_INIT();
    struct fgraph *fg = (struct fgraph *)g;
    if (fg == NULL || fg->magic != M_GRAPH || exec == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fexec *e = calloc(1, sizeof *e);
    if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = M_EXEC;
    e->alive = 1;
    for (int i = 0; i < fg->n; i++)
        if (fg->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) e->need[fake_phys_of(fg->nodes[i].ordinal)] += fg->nodes[i].bytes;
    fake_lock();
    int ok = exec_count < 1024;
    if (ok) execs[exec_count++] = e;
    fake_unlock();
    if (!ok) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *exec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (exec == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuGraphInstantiateWithFlags(exec, g, p != NULL ? p->flags : 0);
    if (p != NULL) p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

/* The graph's memory becomes real: the pool grows to what it needs. */
static CUresult graph_make_real(CUgraphExec exec)
{
    NEED_INIT();
    struct fexec *e = (struct fexec *)exec;
    if (e == NULL || e->magic != M_EXEC || !e->alive) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    CUresult r = CUDA_SUCCESS;
    for (int g = 0; g < FAKE_MAX_GPUS && r == CUDA_SUCCESS; g++) {
        if (e->need[g] <= graph_reserved[g]) continue;
        if (fake_phys_take(g, e->need[g] - graph_reserved[g]) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
        else graph_reserved[g] = e->need[g];
    }
    if (r == CUDA_SUCCESS) e->launched = 1;
    fake_unlock();
    return r;
}

API CUresult cuGraphUpload(CUgraphExec exec, CUstream s)
{
    return graph_make_real(exec);
}

API CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    CUresult r = graph_make_real(exec);
    if (r == CUDA_SUCCESS) fake_launch_graph();
    return r;
}

API CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s)
{
    return cuGraphUpload(exec, s);
}

API CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    return cuGraphLaunch(exec, s);
}

API CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    struct fexec *e = (struct fexec *)exec;
    if (e == NULL || e->magic != M_EXEC || !e->alive) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    e->alive = 0;
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGraphMemTrim(CUdevice d)
{
    NEED_INIT();
    int g = fake_phys_of(d);
    if (g < 0) return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    uint64_t keep = 0;
    for (int i = 0; i < exec_count; i++)
        if (execs[i]->alive && execs[i]->launched && execs[i]->need[g] > keep) keep = execs[i]->need[g];
    if (graph_reserved[g] > keep) {
        fake_phys_give(g, graph_reserved[g] - keep);
        graph_reserved[g] = keep;
    }
    fake_unlock();
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute attr, void *value)
{
    NEED_INIT();
    int g = fake_phys_of(d);
    if (g < 0 || value == NULL) return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    *(cuuint64_t *)value = graph_reserved[g];
    fake_unlock();
    return CUDA_SUCCESS;
}
