package sqlinbox

import "testing"

func TestMySQLSessionChange(t *testing.T) {
	refused := map[string]string{
		"SET NAMES gbk":                                                      "names",
		"set names 'sjis' collate sjis_bin":                                  "names",
		"  /* why */ SET CHARACTER SET big5":                                 "character set",
		"-- why\nSET CHARSET cp932":                                          "charset",
		"# why\nSET character_set_client = gbk":                              "character_set_client",
		"SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')": "sql_mode",
		"SET @@session.sql_mode = 'ANSI_QUOTES'":                             "sql_mode",
		"SET @@sql_mode = ''":                                                "sql_mode",
		"SET @x = 1, character_set_connection = gbk":                         "character_set_connection",
		"/*!40101 SET NAMES gbk */":                                          "names",
		"/*M!100100 SET sql_mode = '' */":                                    "sql_mode",
		"SET STATEMENT sql_mode = '' FOR INSERT INTO t VALUES (?)":           "sql_mode",
		"SET\tNAMES utf8mb4":                                                 "names",
		"PREPARE s FROM 'SET NAMES gbk'":                                     "PREPARE",
		"prepare s from @text":                                               "PREPARE",
		"EXECUTE s":                                                          "EXECUTE",
		"/*!50000 EXECUTE s */":                                              "EXECUTE",
	}
	for statement, want := range refused {
		if got := (MySQL{}).sessionChange(statement); got != want {
			t.Errorf("sessionChange(%q) = %q, want %q", statement, got, want)
		}
	}
	allowed := []string{
		"INSERT INTO t (names) VALUES (?)",
		"UPDATE t SET names = ?, charset = ? WHERE id = ?", // columns of the application's
		"SET @names = 1",
		"SET @sql_mode = 'x'",
		"SET SESSION innodb_lock_wait_timeout = 3",
		"SETTINGS",
		"SELECT 'SET NAMES gbk'",
		"-- SET NAMES gbk\nINSERT INTO t VALUES (1)",
		"SET my_names = 1",
		"SET names_of_things = 1",
		"SELECT execute_at FROM t",
		"INSERT INTO prepared (a) VALUES (1)",
	}
	for _, statement := range allowed {
		if got := (MySQL{}).sessionChange(statement); got != "" {
			t.Errorf("sessionChange(%q) = %q, want none", statement, got)
		}
	}
	for charset, unsafe := range map[string]bool{"gbk": true, "SJIS": true, "cp932": true, "big5": true, "gb18030": true,
		"utf8mb4": false, "utf8mb3": false, "latin1": false, "gb2312": false, "euckr": false, "ujis": false, "": false, "gb": false} {
		if got := (MySQL{}).unsafeCharset(charset); got != unsafe {
			t.Errorf("unsafeCharset(%q) = %v, want %v", charset, got, unsafe)
		}
	}
}
