// SPDX-License-Identifier: MIT
/*
 * CUDA graphs for the GPU deframer: one executable graph per batch shape,
 * built and instantiated on first use, then replayed with cudaGraphLaunch
 * after its parameters are updated for the batch.
 *  - The one-pass kernel (v7s) is built node by node (struct bplan): shape =
 *    kind (run: one kernel; staged: chunk copies and kernels), number of
 *    chunks, descriptor copy or not; updates set each node's parameters
 *    (addresses, counts, grid size).
 *  - The two-pass variants (v11, auto) shape their batches on the host as they
 *    are enqueued (copy stride from the longest payload seen, auto's choice),
 *    so what the stream path enqueues is captured and the cached executable
 *    graph of the same shape and topology updated with it
 *    (cudaGraphExecUpdate); the copy pass's programmatic dependent launch
 *    becomes a programmatic edge.
 * A refused update instantiates the shape anew (counted in grebuilds); a
 * graph that cannot be built or launched switches the handle to stream launch
 * for good (gpu.h).
 */
#include <stdlib.h>
#include <string.h>

#include "dfr.h"

struct gent {
	cudaGraphExec_t exec; /* NULL: free entry */
	cudaGraph_t graph;    /* kept: node updates name the nodes of the graph instantiated */
	int kind;             /* 0 run, 1 staged (node by node); 2 run, 3 staged (captured) */
	uint32_t nch;
	bool desc;
	const struct kvar *kv;
	uint64_t stamp;
	uint64_t topo;        /* captured graphs: the topology launch chose (pdma_gpu_dfr.topo) */
	cudaGraphNode_t cp[GMAXC], kn[GMAXC], dn;
};

static cudaKernelNodeParams knode(struct kplan *k)
{
	cudaKernelNodeParams p;
	memset(&p, 0, sizeof(p));
	p.func = (void *)dfr_onepass;
	p.gridDim = dim3(k->blocks);
	p.blockDim = dim3(256);
	p.sharedMemBytes = 0;
	p.kernelParams = k->p;
	return p;
}

static void gent_free(struct gent *e)
{
	if (e->exec)
		cudaGraphExecDestroy(e->exec);
	if (e->graph)
		cudaGraphDestroy(e->graph);
	e->exec = NULL;
	e->graph = NULL;
}

static void graph_flush(struct pdma_gpu_dfr *g)
{
	for (int i = 0; g->gc && i < GCACHE; i++)
		gent_free(&g->gc[i]);
}

int dfr_graph_init(struct pdma_gpu_dfr *g)
{
	g->gc = (struct gent *)calloc(GCACHE, sizeof(struct gent));
	return g->gc ? 0 : -ENOMEM;
}

void dfr_graph_fini(struct pdma_gpu_dfr *g)
{
	graph_flush(g);
	free(g->gc);
	g->gc = NULL;
}

#define GCK(call)                                                                         \
	do {                                                                              \
		cudaError_t e_ = (call);                                                  \
		if (e_ != cudaSuccess) {                                                  \
			snprintf(g->err, sizeof(g->err), "graph: %s: %s", #call,          \
				 cudaGetErrorString(e_));                                 \
			goto fail;                                                        \
		}                                                                         \
	} while (0)

/* The cached executable graph of a shape, or NULL; *victim: the entry to
 * reuse for it (free, else least recently launched). topo is 0 for the
 * graphs built node by node. */
static struct gent *gcache_find(struct pdma_gpu_dfr *g, int kind, uint32_t nch, bool desc,
				const struct kvar *kv, uint64_t topo, struct gent **victim)
{
	*victim = &g->gc[0];
	for (int i = 0; i < GCACHE; i++) {
		struct gent *x = &g->gc[i];
		if (x->exec && x->kind == kind && x->nch == nch && x->desc == desc && x->kv == kv && x->topo == topo)
			return x;
		if (!x->exec || ((*victim)->exec && x->stamp < (*victim)->stamp))
			*victim = x;
	}
	return NULL;
}

/* A graph could not be built or launched (nothing of the batch was
 * launched): drop the cache and use stream launch from now on. Returns 1. */
static int graph_give_up(struct pdma_gpu_dfr *g, cudaGraph_t gr)
{
	if (gr)
		cudaGraphDestroy(gr);
	cudaGetLastError();
	graph_flush(g);
	fprintf(stderr, "gpu deframer: %s; using stream launch from now on\n", g->err);
	g->launch = PDMA_GPU_LAUNCH_STREAM;
	return 1;
}

int dfr_graph_launch(struct pdma_gpu_dfr *g, struct bplan *b)
{
	struct gent *victim, *e;
	cudaGraph_t gr = NULL;
	e = gcache_find(g, b->kind, b->nch, b->desc, g->kv, 0, &victim);
	if (e) {
		cudaError_t u = cudaSuccess;
		for (uint32_t k = 0; k < b->nch && u == cudaSuccess; k++) {
			if (b->kind == 1)
				u = cudaGraphExecMemcpyNodeSetParams1D(e->exec, e->cp[k], b->stage[k], b->hsrc[k],
								       b->bytes[k], cudaMemcpyHostToDevice);
			cudaKernelNodeParams p = knode(&b->k[k]);
			if (u == cudaSuccess)
				u = cudaGraphExecKernelNodeSetParams(e->exec, e->kn[k], &p);
		}
		if (b->desc && u == cudaSuccess)
			u = cudaGraphExecMemcpyNodeSetParams1D(e->exec, e->dn, b->hdesc, b->ddesc, b->dbytes,
							       cudaMemcpyDeviceToHost);
		if (u != cudaSuccess) {
			/* An update the driver refuses: instantiate this shape anew
			 * (counted; correct, only slower). */
			cudaGetLastError();
			if (!g->grebuilds++)
				fprintf(stderr, "gpu deframer: graph node update: %s; rebuilding instead\n",
					cudaGetErrorString(u));
			victim = e;
			e = NULL;
		}
	}
	if (!e) {
		e = victim;
		gent_free(e);
		GCK(cudaGraphCreate(&gr, 0));
		for (uint32_t k = 0; k < b->nch; k++) {
			cudaGraphNode_t dep[2];
			size_t nd = 0;
			if (b->kind == 1) {
				/* Stage k & 1 is free once kernel k - 2 is done. */
				if (k >= 2)
					dep[nd++] = e->kn[k - 2];
				GCK(cudaGraphAddMemcpyNode1D(&e->cp[k], gr, dep, nd, b->stage[k], b->hsrc[k],
							     b->bytes[k], cudaMemcpyHostToDevice));
				nd = 0;
				dep[nd++] = e->cp[k];
			}
			cudaKernelNodeParams p = knode(&b->k[k]);
			GCK(cudaGraphAddKernelNode(&e->kn[k], gr, dep, nd, &p));
		}
		if (b->desc) {
			/* Kernel k waited for kernel k - 2: the last two cover all. */
			cudaGraphNode_t dep[2] = { e->kn[b->nch - 1], b->nch >= 2 ? e->kn[b->nch - 2] : NULL };
			GCK(cudaGraphAddMemcpyNode1D(&e->dn, gr, dep, b->nch >= 2 ? 2 : 1, b->hdesc, b->ddesc,
						     b->dbytes, cudaMemcpyDeviceToHost));
		}
		GCK(cudaGraphInstantiate(&e->exec, gr, 0));
		e->graph = gr;
		gr = NULL;
		e->kind = b->kind;
		e->nch = b->nch;
		e->desc = b->desc;
		e->kv = g->kv;
		e->topo = 0;
	}
	e->stamp = ++g->gstamp;
	GCK(cudaGraphLaunch(e->exec, g->s[0]));
	return 0;
fail:
	return graph_give_up(g, gr);
}

/* A refused update (another topology, e.g. auto's first batch, before any
 * payload is known, runs the one-pass kernel) instantiates anew. Nothing runs
 * while capturing: on a capture failure (1 returned) the caller enqueues the
 * batch on streams. The caller allocates first (work lists, stage and
 * descriptor buffers): no allocation may happen inside a capture. */
int dfr_capture_launch(struct pdma_gpu_dfr *g, int kind, uint32_t nch, bool desc, int (*enqueue)(void *),
		       void *arg)
{
	struct gent *e, *victim;
	cudaGraph_t gr = NULL;
	g->topo = 0;
	GCK(cudaStreamBeginCapture(g->s[0], cudaStreamCaptureModeThreadLocal));
	{
		const int ret = enqueue(arg);
		const cudaError_t ce = cudaStreamEndCapture(g->s[0], &gr);
		if (ret) {
			/* last_error() has enqueue's reason. */
			if (gr)
				cudaGraphDestroy(gr);
			cudaGetLastError();
			return ret;
		}
		GCK(ce);
	}
	/* The shape includes the topology the capture recorded, so an update
	 * changes parameters only. */
	e = gcache_find(g, kind, nch, desc, g->kv, g->topo, &victim);
	if (e) {
		cudaGraphExecUpdateResultInfo info;
		if (cudaGraphExecUpdate(e->exec, gr, &info) != cudaSuccess) {
			cudaGetLastError();
			g->grebuilds++;
			victim = e;
			e = NULL;
		}
	}
	if (!e) {
		e = victim;
		gent_free(e);
		GCK(cudaGraphInstantiate(&e->exec, gr, 0));
		e->kind = kind;
		e->nch = nch;
		e->desc = desc;
		e->kv = g->kv;
		e->topo = g->topo;
	}
	cudaGraphDestroy(gr);
	gr = NULL;
	e->stamp = ++g->gstamp;
	GCK(cudaGraphLaunch(e->exec, g->s[0]));
	return 0;
fail:
	return graph_give_up(g, gr);
}
