// Creates the transaction and lock tables of a Hive 2.3 metastore database (HIVE_LOCKS, TXNS...),
// which the metastore's lock API needs and its schema auto-creation does not make: pyiceberg's
// and Iceberg Java's Hive catalogs lock a table for each commit. The database is the one in the
// javax.jdo.option.ConnectionURL system property (HiveConf reads it from there). Run with Java's
// single-file source launcher and pyspark's jars on the class path, before the metastore starts:
//   java -Djavax.jdo.option.ConnectionURL=... -cp 'PYSPARK_JARS/*' PrepareTxnTables.java
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.txn.TxnDbUtil;

public class PrepareTxnTables {
    public static void main(String[] args) throws Exception {
        TxnDbUtil.prepDb(new HiveConf());
    }
}
