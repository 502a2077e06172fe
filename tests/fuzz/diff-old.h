/* Included first by the old side of fuzz-diff-message (the message layer of DIFF_BASE): its public
 * names get an old_ prefix, so that both sides link into one program. */
#define message_parse             old_message_parse
#define message_parse_envelope    old_message_parse_envelope
#define message_json              old_message_json
#define message_ref               old_message_ref
#define message_unref             old_message_unref
#define message_unrefp            old_message_unrefp
#define message_split_batch       old_message_split_batch
#define message_is_batch          old_message_is_batch
#define message_splice            old_message_splice
#define message_splice_buf        old_message_splice_buf
#define json_id_valid             old_json_id_valid
#define message_find              old_message_find
#define message_members           old_message_members
#define message_key_is            old_message_key_is
#define message_string            old_message_string
#define message_has_envelope      old_message_has_envelope
#define message_span_dup          old_message_span_dup
#define message_span_has_nul      old_message_span_has_nul
#define message_path_has_nul      old_message_path_has_nul
#define message_id_json           old_message_id_json
#define diff_message_view         old_diff_message_view
/* The id rules (common/ids.c) read a Message's spans: the old side needs its own, built against its
 * own message.h, or it reads an old-layout Message through today's accessors. */
#define ids_fields                old_ids_fields
#define ids_method_kind_mismatch  old_ids_method_kind_mismatch
#define ids_rules_of              old_ids_rules_of
#define ids_translate             old_ids_translate
#define ids_translate_buf         old_ids_translate_buf
#define ids_translate_send        old_ids_translate_send
#define id_paths                  old_id_paths
#define id_text_string            old_id_text_string
#define id_text_integer           old_id_text_integer
#define id_text_canonical         old_id_text_canonical
#define id_integer_format         old_id_integer_format
