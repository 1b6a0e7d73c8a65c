/*
 * The progress line. Minimal for now: nothing is drawn.
 */
#include "host/progress.h"

void wq_progress_start(wq_host *h)
{
    (void)h;
}

void wq_progress_clear(wq_host *h)
{
    (void)h;
}

void wq_progress_draw(wq_host *h, int force)
{
    (void)h;
    (void)force;
}

void wq_progress_finish(wq_host *h)
{
    (void)h;
}
