/* capture.c — stream capture.  While a stream captures, its stream-ordered
 * allocations become graph memory nodes (charged when the graph becomes
 * real: hooks_graph.c), and the interposer must make no call that is not
 * capture-safe: in the global capture mode (PyTorch's default) such a call
 * from any thread invalidates the capture.  cuStreamGetDevice and
 * cuMemPoolGetAttribute did (H100, driver 580), so while any capture is
 * under way the pools are not reconciled and the stream's device is taken
 * from the current context.
 *
 * The count of captures under way is kept by hooking the begin and end
 * calls; an end that fails (an invalidated capture) still ends it. */
#include "hooks.h"

#undef cuStreamBeginCapture
#undef cuStreamEndCapture
#undef cuStreamBeginCaptureToGraph

static int captures; /* atomic: captures begun and not ended */

int gs_capturing(void)
{
    return __atomic_load_n(&captures, __ATOMIC_ACQUIRE) > 0;
}

int gs_stream_capturing(CUstream s)
{
    if (!gs_capturing()) return 0;
    /* The legacy default stream cannot capture, and asking about it while a
     * global capture is under way is itself an error. */
    if (s == NULL || s == CU_STREAM_LEGACY) return 0;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (GS_CALL(gs_real_cuStreamIsCapturing, s, &st) != CUDA_SUCCESS) return 1; /* assume the worst: no charge now */
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

void gs_capture_reset_process(void)
{
    __atomic_store_n(&captures, 0, __ATOMIC_RELAXED);
}

static CUresult begun(CUresult r)
{
    if (r == CUDA_SUCCESS) __atomic_add_fetch(&captures, 1, __ATOMIC_ACQ_REL);
    return r;
}

static CUresult ended(CUresult r)
{
    /* Success and "invalidated" both end the capture; other errors (not
     * capturing, wrong thread) leave it as it was. */
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED) {
        int cur = __atomic_load_n(&captures, __ATOMIC_RELAXED);
        while (cur > 0 && !__atomic_compare_exchange_n(&captures, &cur, cur - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        }
    }
    return r;
}

GS_EXPORT CUresult cuStreamBeginCapture(CUstream s)
{
    ENTER(gs_real_cuStreamBeginCapture);
    return begun(gs_real_cuStreamBeginCapture(s));
}

GS_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    ENTER(gs_real_cuStreamBeginCapture_ptsz);
    return begun(gs_real_cuStreamBeginCapture_ptsz(s));
}

GS_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    ENTER(gs_real_cuStreamBeginCapture_v2);
    return begun(gs_real_cuStreamBeginCapture_v2(s, mode));
}

GS_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    ENTER(gs_real_cuStreamBeginCapture_v2_ptsz);
    return begun(gs_real_cuStreamBeginCapture_v2_ptsz(s, mode));
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                               const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode)
{
    ENTER(gs_real_cuStreamBeginCaptureToGraph);
    return begun(gs_real_cuStreamBeginCaptureToGraph(s, g, deps, data, n, mode));
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                    const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode)
{
    ENTER(gs_real_cuStreamBeginCaptureToGraph_ptsz);
    return begun(gs_real_cuStreamBeginCaptureToGraph_ptsz(s, g, deps, data, n, mode));
}

GS_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    ENTER(gs_real_cuStreamEndCapture);
    return ended(gs_real_cuStreamEndCapture(s, g));
}

GS_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    ENTER(gs_real_cuStreamEndCapture_ptsz);
    return ended(gs_real_cuStreamEndCapture_ptsz(s, g));
}
