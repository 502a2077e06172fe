/* The MessageView of a Message (diff-view.h), built against whichever message.h is found first: today's
 * for the new side, DIFF_BASE's (with diff-old.h included first) for the old one. */
#include "diff-view.h"
#include "message.h"

_Static_assert(_ID_PATH_MAX + _ROUTE_PATH_MAX <= DIFF_VIEW_PATHS, "a view holds every path");

void diff_message_view(const Message *m, MessageView *ret) {
        *ret = (MessageView){
                .kind = m->kind,
                .text = m->text,
                .len = m->len,
                .problem = m->problem,
                .method = m->method,
                .id_text = m->id_text,
                .id = m->id,
#ifdef MESSAGE_LAZY_ID_JSON
                .id_json = message_id_json(m),
#else
                .id_json = m->id_json,
#endif
                .id_rules = m->id_rules,
                .n_paths = _ID_PATH_MAX + _ROUTE_PATH_MAX,
        };
        for (unsigned p = 0; p < _ID_PATH_MAX + _ROUTE_PATH_MAX; p++) {
#ifdef MESSAGE_NOTED_SPANS
                Span s = message_path_span(m, p);
#else
                Span s = p < _ID_PATH_MAX ? m->spans[p] : m->route[p - _ID_PATH_MAX];
#endif
                ret->spans[p] = (DiffSpan){s.start, s.len};
        }
}
